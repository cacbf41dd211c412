// kv_geometry: THE bytes-per-token formula, used by the engine's pool, the metrics and
// `kvserve plan`:
//
//   KV bytes per token = layers x 2 x kv_heads x head_dim x bytes_per_element
//
// generalised per layer: a layer stores kv_heads vectors of K (head_dim_k elements) and of V
// (head_dim_v elements) per token, each in its KvDtype with its scale bytes (kv_format.h).
//
// The general description (KvModelShape) lists every layer with its kind:
//   full attention   holds every token of a request:       kv_heads x (K vector + V vector)
//   sliding window   holds at most `window` tokens:         same bytes per token, min(N, window)
//   MLA latent       one latent vector per token, no heads, no K/V pair:
//                    (kv_lora_rank + qk_rope_head_dim) elements in the K format
//   no KV            linear attention / SSM: nothing per token, a fixed state per sequence
// Tensor parallelism over `tp` ranks splits the KV heads as vLLM's QKVParallelLinear does
// (vllm/model_executor/layers/linear.py): kv_heads / tp heads per rank when tp divides kv_heads,
// one head per rank (each replicated tp / kv_heads times) when tp is a multiple of kv_heads, and
// any other split is refused (validate_kv_shape). MLA latents are replicated on every rank; a
// linear-attention/SSM state is split by heads, ceil(state_bytes / tp) per rank. All byte counts
// below are per rank.
//
// The uniform case (KvUniformShape: every layer full attention with the same heads) is what the
// engine runs; kv_token_bytes(KvUniformShape) is the general code applied to it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/kv_format.h"
#include "quant/kv_layer_formats.h"

namespace kvs {

// The uniform case every llama-style model is: all layers alike, full attention.
struct KvUniformShape {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim_k = 0;
  uint32_t head_dim_v = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  // The layers whose K or V has its own format (quant/kv_layer_formats.h); none by default.
  KvLayerFormats layer_formats;
};

struct KvTokenBytes {
  // kv_heads x kv_vector_bytes(k_dtype, head_dim_k): a layer in the shape's own formats.
  uint64_t k_bytes_per_layer = 0;
  uint64_t v_bytes_per_layer = 0;
  // layers x (k + v), or with per-layer formats the sum of every layer's.
  uint64_t bytes_per_token = 0;
  // "30 x 2 x 3 x 64 x 2 = 23,040 B" (or the K/V split when K and V differ).
  std::string formula;
};

[[nodiscard]] KvTokenBytes kv_token_bytes(const KvUniformShape& shape);

// ---- The general, per-layer description ------------------------------------------------------

enum class KvLayerKind : uint8_t {
  kFull,     // full attention: holds all N tokens of a request
  kSliding,  // sliding-window attention: holds min(N, window) tokens
  kMla,      // multi-head latent attention (DeepSeek): one latent vector per token
  kNoKv,     // linear attention / SSM: no per-token KV, a fixed state per sequence
};
inline constexpr int kNumKvLayerKinds = 4;

// "full attention", "sliding window", "MLA latent", "linear/SSM state".
[[nodiscard]] const char* kv_layer_kind_name(KvLayerKind kind);

// One layer. Only the fields of its kind are meaningful (the others stay 0).
struct KvLayer {
  KvLayerKind kind = KvLayerKind::kFull;
  uint32_t kv_heads = 0;          // kFull, kSliding
  uint32_t head_dim_k = 0;        // kFull, kSliding
  uint32_t head_dim_v = 0;        // kFull, kSliding
  uint32_t window = 0;            // kSliding: tokens held per request at most (> 0)
  uint32_t kv_lora_rank = 0;      // kMla
  uint32_t qk_rope_head_dim = 0;  // kMla
  uint64_t state_bytes = 0;       // kNoKv: bytes per sequence (all ranks together)

  static KvLayer full(uint32_t kv_heads, uint32_t head_dim_k, uint32_t head_dim_v) {
    return {.kind = KvLayerKind::kFull,
            .kv_heads = kv_heads,
            .head_dim_k = head_dim_k,
            .head_dim_v = head_dim_v};
  }
  static KvLayer sliding(uint32_t kv_heads, uint32_t head_dim_k, uint32_t head_dim_v,
                         uint32_t window) {
    return {.kind = KvLayerKind::kSliding,
            .kv_heads = kv_heads,
            .head_dim_k = head_dim_k,
            .head_dim_v = head_dim_v,
            .window = window};
  }
  static KvLayer mla(uint32_t kv_lora_rank, uint32_t qk_rope_head_dim) {
    return {.kind = KvLayerKind::kMla,
            .kv_lora_rank = kv_lora_rank,
            .qk_rope_head_dim = qk_rope_head_dim};
  }
  static KvLayer no_kv(uint64_t state_bytes) {
    return {.kind = KvLayerKind::kNoKv, .state_bytes = state_bytes};
  }
  friend bool operator==(const KvLayer&, const KvLayer&) = default;
};

// A whole model's KV shape on one tensor-parallel rank.
struct KvModelShape {
  std::vector<KvLayer> layers;
  KvDtype k_dtype = KvDtype::kF16;  // also the format of MLA latents
  KvDtype v_dtype = KvDtype::kF16;
  // Full and sliding layers whose K or V has its own format (quant/kv_layer_formats.h), by
  // index into `layers`; every other layer stores K in k_dtype and V in v_dtype.
  KvLayerFormats layer_formats;
  uint32_t tp = 1;  // tensor-parallel ranks (>= 1)
  // The engine's f16 rows beside the blocks that every running sequence holds
  // (kv_layer_row_bytes): its `--kv-recent-window` (tokens, 0 = none) and `--kv-attention-sink`.
  // Capacity plans count them per request; the engine's pool plan (kv_pool_plan.h) counts them
  // for its --max-num-seqs slots instead and leaves these at 0.
  uint32_t recent_window = 0;
  bool attention_sink = false;
  KvDtype recent_window_dtype = KvDtype::kF16;  // its rows (`--kv-recent-window-dtype`)

  // Every layer full attention, tp = 1: the engine's shape.
  [[nodiscard]] static KvModelShape uniform(const KvUniformShape& u);
  // Layer i's K (V) format: its own, or the shape's.
  [[nodiscard]] KvDtype k_dtype_at(size_t i) const {
    return layer_formats.k_at(static_cast<uint32_t>(i), k_dtype);
  }
  [[nodiscard]] KvDtype v_dtype_at(size_t i) const {
    return layer_formats.v_at(static_cast<uint32_t>(i), v_dtype);
  }
};

// invalid_argument naming `--kv-recent-window` unless `tokens` is a window the engine takes (a
// multiple of 16 up to 4,096; 0 = none).
[[nodiscard]] Status check_recent_window(uint32_t tokens);

// Rejects shapes the formula cannot size: no layers, zero heads/dims/window, tp = 0, KV heads that
// tp cannot split (check_kv_heads_split), a grouped format (int4, q8_0, q4_0) with a vector
// length that is not a multiple of its group, a recent window (or sink) the engine does not
// take, or per-layer formats that check_kv_layer_formats refuses or that name an MLA or no-KV
// layer.
[[nodiscard]] Status validate_kv_shape(const KvModelShape& shape);

// KV heads one rank stores: kv_heads / tp, or 1 when tp >= kv_heads (the head is replicated).
// Splits that are neither (8 heads over tp 3) are refused by check_kv_heads_split; for them this
// rounds up (ceil(kv_heads / tp)), never down, so no caller can under-count a rank's bytes.
[[nodiscard]] uint32_t kv_heads_per_rank(uint32_t kv_heads, uint32_t tp);
// ok when `tp` ranks can hold `kv_heads` heads: tp divides kv_heads, or kv_heads divides tp
// (replication). Otherwise invalid_argument naming the tp values that work; vLLM refuses the same
// splits (its divide() asserts).
[[nodiscard]] Status check_kv_heads_split(uint32_t kv_heads, uint32_t tp);

// Bytes one token adds to `layer` on one rank (0 for kNoKv), scales included.
[[nodiscard]] uint64_t kv_layer_token_bytes(const KvLayer& layer, KvDtype k, KvDtype v,
                                            uint32_t tp);
// The same for layer i of `shape`, in its own formats (KvModelShape::k_dtype_at).
[[nodiscard]] uint64_t kv_layer_token_bytes(const KvModelShape& shape, size_t i);
// ---- Windowed layers: what a request holds -------------------------------------------------
//
// A sliding layer's query at position p attends positions [p - window + 1, p]. During a step
// that computes positions [s, e) of a request the layer therefore needs positions
// [max(0, s - window + 1), e): the step's first query reaches window - 1 positions back. After
// the step it needs [max(0, e - window + 1), e) for the next query. With chunk = e - s that is
// window - 1 + chunk tokens during the step (window during a one-token decode step), held in the
// whole blocks spanning those positions. This is the engine's rule (docs/planner.md, "Windowed
// layers"); vLLM reserves the same per request, plus one block for the worst alignment
// (SlidingWindowSpec.max_memory_usage_bytes: cdiv(window - 1 + max_num_batched_tokens, block)
// + 1).

// First position a windowed layer still needs while a step computes positions from step_start:
// max(0, step_start - window + 1).
[[nodiscard]] uint64_t kv_window_first_needed(uint32_t window, uint64_t step_start);
// Tokens a windowed layer holds for a request of n tokens during the step that computes its last
// chunk_tokens positions [n - chunk, n) (chunk_tokens >= 1; larger than n means all of them):
// min(n, window - 1 + chunk_tokens). chunk_tokens 1, a decode step, gives min(n, window).
[[nodiscard]] uint64_t kv_window_held_tokens(uint32_t window, uint64_t n_tokens,
                                             uint64_t chunk_tokens);
// Whole blocks spanning positions [first, end): ceil(end / block) - floor(first / block), 0 when
// first >= end. Precondition: block_size > 0.
[[nodiscard]] uint64_t kv_blocks_spanned(uint64_t first, uint64_t end, uint32_t block_size);

// Tokens `layer` holds for a request of n tokens: n (full, MLA), 0 (kNoKv) or, for a sliding
// layer, min(n, window) when chunk_tokens is 0 (the planner's default, the count of a decode step)
// and kv_window_held_tokens(window, n, chunk_tokens) otherwise.
[[nodiscard]] uint64_t kv_layer_held_tokens(const KvLayer& layer, uint64_t n,
                                            uint64_t chunk_tokens = 0);
// Token slots `layer` takes for a request of n tokens in blocks of block_size (0 = exact
// tokens): full and MLA layers round n up to whole blocks. A sliding layer
//   chunk_tokens == 0 (default): min(n, window) rounded up to whole blocks, as if the window began
//                     on a block boundary (it may span one block more; see docs/planner.md);
//   chunk_tokens >= 1: the blocks spanning the positions it holds during the step that computes
//                     the last chunk_tokens positions of the request (kv_window_held_tokens,
//                     kv_blocks_spanned), i.e. what the engine holds.
[[nodiscard]] uint64_t kv_layer_held_slots(const KvLayer& layer, uint64_t n, uint32_t block_size,
                                           uint64_t chunk_tokens = 0);
// Bytes of `layer`'s fixed per-sequence state on one rank: ceil(state_bytes / tp), 0 otherwise.
[[nodiscard]] uint64_t kv_layer_state_bytes(const KvLayer& layer, uint32_t tp);
// Bytes of the f16 rows a sequence holds for a full or sliding `layer` on one rank beside its
// blocks, as the engine keeps them: with the shape's recent window W its ring of W + 16 tokens'
// K and V (quant/recent_window.h) and with the attention sink two more rows
// (quant/attention_sink.h); with a per-channel K format the keys of its partly filled group
// (quant/key_tails.h). 0 for other layers.
[[nodiscard]] uint64_t kv_layer_row_bytes(const KvLayer& layer, const KvModelShape& shape);
// Everything `layer` holds per sequence whatever its length: state and rows.
[[nodiscard]] uint64_t kv_layer_sequence_bytes(const KvLayer& layer, const KvModelShape& shape);

// ---- Linear-attention state --------------------------------------------------------------------

// A gated delta net layer (Qwen3-Next, Qwen3.5) holds, per sequence, a causal-conv window and a
// recurrent state; vLLM sizes them in MambaStateShapeCalculator.gated_delta_net_state_shape
// (vllm/model_executor/layers/mamba/mamba_utils.py):
//   conv       (conv_kernel - 1) x (2 x key_heads x key_dim + value_heads x value_dim) elements
//   recurrent  value_heads x key_dim x value_dim elements
// and their dtypes in MambaStateDtypeCalculator: the conv state in the cache dtype (the model
// dtype unless --mamba-cache-dtype says otherwise), the recurrent (temporal) state in
// --mamba-ssm-cache-dtype, which a checkpoint's `mamba_ssm_dtype` sets (Qwen3.5: float32).
struct GatedDeltaNetShape {
  uint32_t key_heads = 0;
  uint32_t value_heads = 0;
  uint32_t key_dim = 0;
  uint32_t value_dim = 0;
  uint32_t conv_kernel = 4;
};
struct LinearStateBytes {
  uint64_t conv = 0;  // per sequence, all ranks together
  uint64_t recurrent = 0;
  [[nodiscard]] uint64_t total() const { return conv + recurrent; }
};
[[nodiscard]] LinearStateBytes gated_delta_net_state_bytes(const GatedDeltaNetShape& shape,
                                                           uint32_t conv_elem_bytes,
                                                           uint32_t recurrent_elem_bytes);

// The engine's rows beside the blocks over every layer (kv_layer_row_bytes): the window's rings
// (with the sink's rows) and the per-channel keys' tails.
struct KvSequenceRowBytes {
  uint64_t recent_window = 0;
  uint64_t key_tails = 0;
  [[nodiscard]] uint64_t total() const { return recent_window + key_tails; }
};

// Per-token bytes split by layer kind (the sum over that kind's layers), per rank.
struct KvShapeBytes {
  std::array<uint32_t, kNumKvLayerKinds> layers_by_kind{};       // index: KvLayerKind
  std::array<uint64_t, kNumKvLayerKinds> token_bytes_by_kind{};  // kNoKv entry is 0
  uint64_t bytes_per_token = 0;           // all per-token layers (sliding ones while N <= window)
  uint64_t state_bytes_per_sequence = 0;  // all kNoKv layers
  KvSequenceRowBytes rows_per_sequence;   // kv_layer_row_bytes over all layers
  // The formula with the model's numbers, one term per group of identical layers, e.g.
  //   "32 x 2 x 8 x 128 x 2 = 131,072 B"                                     (uniform)
  //   "21 x 2 x 8 x 256 x 2 [full] + 21 x 2 x 8 x 256 x 2 [window 4096] = 344,064 B"
  //   "61 x (512 + 64) x 2 [MLA] = 70,272 B"
  // With per-layer formats, one term per group of identical layers in the same formats, tagged
  // with them: "27 x 3 x (64 x (20/64) + 64 x (20/64)) [K int2_chan64, V int2_had] + ...".
  // A uniform full-attention shape gives exactly kv_token_bytes(...).formula.
  std::string formula;
};
[[nodiscard]] KvShapeBytes kv_shape_bytes(const KvModelShape& shape);

// Bytes a request of n tokens holds on one rank, split by kind (per-sequence state and the
// engine's rows beside the blocks, kv_layer_sequence_bytes, counted once).
struct KvRequestBytes {
  std::array<uint64_t, kNumKvLayerKinds> by_kind{};  // kNoKv entry = the fixed state
  uint64_t total = 0;
};
// chunk_tokens as in kv_layer_held_tokens (0: windowed layers hold min(n, window) tokens).
[[nodiscard]] KvRequestBytes kv_request_breakdown(const KvModelShape& shape, uint64_t n_tokens,
                                                  uint64_t chunk_tokens = 0);
[[nodiscard]] uint64_t kv_request_bytes(const KvModelShape& shape, uint64_t n_tokens,
                                        uint64_t chunk_tokens = 0);

}  // namespace kvs
