// TransformerModel: the forward pass of every architecture kvserve runs (architecture.h says
// what differs: llama — SmolLM2, Llama 2/3, Mistral; gemma3): token embedding -> N x [RMSNorm ->
// Q,K,V -> (q/k norm) -> RoPE -> paged GQA attention (sliding window on local layers) -> O ->
// (post-norm) -> residual -> RMSNorm -> SwiGLU or GeGLU MLP -> (post-norm) -> residual] ->
// RMSNorm -> output (tied to the embedding when the file has no output.weight) -> (soft-cap).
// Activations are f32. The block-quantized weight matrices are packed once, at load, into the
// integer GEMM's row-interleaved layout (kernels/packed_layout.h: every bit kept, the same bytes
// as the file but Q4_K's +2.8%), and the file's pages under them are released; the rest (norms,
// float matrices) are read straight from the file mapping. K/V go to and come from the paged pool,
// each layer in the blocks of its layer group (kvcache/kv_cache_groups.h).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "kvcache/kv_cache_groups.h"
#include "model/architecture.h"
#include "model/forward_batch.h"
#include "model/model_spec.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

class GgufFile;

struct LayerWeights {
  const float* attn_norm = nullptr;       // [d_model]
  const float* ffn_norm = nullptr;        // [d_model]
  const float* q_norm = nullptr;          // [head_dim] (qk_norm only)
  const float* k_norm = nullptr;          // [head_dim] (qk_norm only)
  const float* post_attn_norm = nullptr;  // [d_model] (post_norms only)
  const float* post_ffn_norm = nullptr;   // [d_model] (post_norms only)
  WeightMatrix wq{}, wk{}, wv{}, wo{};
  WeightMatrix w_gate{}, w_up{}, w_down{};
};

class TransformerModel {
 public:
  // Binds every tensor of `file` (which must outlive the model) and checks its type and shape
  // against the spec; a missing or misshapen tensor is an error naming it.
  static Result<TransformerModel> load(const GgufFile& file, const ModelSpec& spec);

  [[nodiscard]] const ModelSpec& spec() const { return spec_; }
  [[nodiscard]] const Architecture& architecture() const { return arch_; }
  // Where each layer's K/V live in the pool (the same grouping the pool is planned with).
  [[nodiscard]] const KvCacheGroups& kv_groups() const { return groups_; }
  // Bytes of all weight tensors the forward pass reads, as the file stores them.
  [[nodiscard]] uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes the weights occupy in memory once loaded: the packed copies plus the tensors read from
  // the file (equal to weight_bytes() when nothing is packed: a CPU without AVX2, or
  // KVSERVE_INT8_ISA=none).
  [[nodiscard]] uint64_t resident_weight_bytes() const { return resident_weight_bytes_; }
  // Wall time load() spent packing the weights.
  [[nodiscard]] double weight_pack_seconds() const { return weight_pack_seconds_; }

  // Test hook: use the scalar reference matmul (exact float arithmetic, no activation
  // quantization) instead of the fast kernels, to check the forward pass itself against an
  // independent implementation to a tight bound.
  void set_reference_matmul(bool on) { reference_matmul_ = on; }

  // Runs the batch: writes each token's K/V into its slot of `kv`, attends through the block
  // tables, and stores logits for batch.logits_rows into logits ([num_logits][vocab_size]).
  void forward(const ForwardBatch& batch, const PagedKvLayout& kv, ThreadPool& pool, float* logits);

 private:
  struct Workspace {
    std::vector<float> x, xn, q, k, v, att, tmp, gate, up, last;
    std::vector<uint8_t> embedding_row;  // a packed embedding row, back in its GGUF bytes
    // This step's RoPE angles, one per distinct rope base among the layers (Gemma 3: local and
    // global); rope_used of them were computed by the current forward.
    std::vector<RopeAngles> rope;
    size_t rope_used = 0;
  };
  struct FreeBytes {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // Packs every matrix the integer GEMM reads (when the CPU has it) and releases the file's
  // pages under them.
  void pack_weights(const GgufFile& file);
  void ensure_workspace(int64_t tokens, int64_t logits);
  void mm(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) const;
  void mm_group(std::span<const MatmulOutput> outputs, const float* x, int64_t T,
                ThreadPool& pool) const;
  // This step's angles for cfg: computed by the first layer that needs them, reused by the rest.
  const RopeAngles& rope_angles(const RopeConfig& cfg, const int32_t* positions, int64_t T);
  // The gate and up projections with the FFN's activation into out (kernels/matmul.h).
  void mm_gated(const WeightMatrix& gate, const WeightMatrix& up, GateActivation act,
                const float* x, int64_t T, float* out, float* up_scratch, ThreadPool& pool) const;

  ModelSpec spec_;
  Architecture arch_;
  KvCacheGroups groups_;
  WeightMatrix embedding_{};
  WeightMatrix output_{};
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  uint64_t weight_bytes_ = 0;
  uint64_t resident_weight_bytes_ = 0;
  double weight_pack_seconds_ = 0;
  std::unique_ptr<uint8_t, FreeBytes> packed_;  // every packed matrix, 64-byte aligned
  bool reference_matmul_ = false;
  Workspace ws_;
};

}  // namespace kvs
