// The KV element formats: how one head vector of K or V is stored in a cache block, including
// its scale bytes. This is THE format table: the engine's pool, the metrics and `kvserve plan`
// all size memory from it (through kv_geometry), so they agree to the byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvs {

enum class KvDtype : uint8_t {
  kF32,
  kF16,
  kBF16,
  kFp8E4M3,     // 1 byte/element, per-tensor scale (no per-token bytes)
  kFp8E5M2,     // 1 byte/element, per-tensor scale
  kInt8,        // 1 byte/element + one f16 scale per token per head
  kInt4,        // 4 bits/element + one f16 scale per group of 32 elements
  kQ8_0,        // llama.cpp block format: 32 elements in 34 bytes
  kQ4_0,        // llama.cpp block format: 32 elements in 18 bytes
  kFp8E4M3Dyn,  // 1 byte/element + one f16 scale per token per head (amax / 448)
  kInt4Had,     // int4 of the head vector rotated by a normalized Hadamard transform
                // (head dim a power of two): 18 bytes per 32 elements, like int4
  // Keys only, quantized per channel over groups of 16 tokens (KIVI's keys;
  // quant/kv_channel_groups.h): each channel of a group has an f16 minimum and step, each element
  // a 4-, 3- or 2-bit code. head_dim / 4 bytes of parameters per token on average.
  kInt4Chan,
  kInt3Chan,
  kInt2Chan,
  // 3 and 2 bits of the Hadamard-rotated vector, per group of 32 elements with an f16 scale
  // (quant/kv_lowbit_groups.h): 14 and 10 bytes per 32 elements. K or V; with per-channel keys
  // they make the 3- and 2-bit KV formats.
  kInt3Had,
  kInt2Had,
  // As kInt4Chan .. kInt2Chan over groups of 64 tokens: a quarter of the parameters' bytes per
  // token (head_dim / 16), so 4-bit keys take int4_had's bytes. The pool's block size must be a
  // multiple of 64. Appended: a format's value is its code in files and tier keys.
  kInt4Chan64,
  kInt3Chan64,
  kInt2Chan64,
  // int8 of the Hadamard-rotated head vector: int8's bytes (one f16 scale per token per head),
  // with the rotation spreading outlier channels over the vector so that they no longer set the
  // one scale (Gemma 3 at 512: int8 +0.78% perplexity, int8_had +0.24%; docs/kv-quantization.md).
  // Keys are scored in integers against the rotated query in int8, as int8's are. Appended.
  kInt8Had,
  // int2_had with one f16 scale per 64 elements instead of 32 (quant/kv_lowbit_groups.h): 18 bytes
  // per 64 elements, so a 2-bit value takes 18 bytes at head dim 64 where int2_had takes 20.
  // Appended.
  kInt2Had64,
  // Keys only: int2_chan64 with the quarter of each group's channels of widest range at 3 bits
  // (quant/kv_channel_groups.h): head_dim / 32 more bytes per token than int2_chan64 (22 against
  // 20 at head dim 64), the widest channels flagged in their steps' sign bits. Appended.
  kInt2MixChan64,
  // 2 bits per element of the Hadamard-rotated vector, trellis-coded over groups of 64
  // (quant/kv_trellis_groups.h): int2_had64's 18 bytes per 64 elements, but each element one of
  // 256 levels chosen with its neighbours, so a smaller error at the same bytes. Slow to write
  // (a Viterbi search per group), as fast to read. Appended.
  kInt2Tcq64,
  // q8_0's blocks (32 int8 and an f16 scale, 34 bytes) of the Hadamard-rotated vector: the
  // rotation spreads a block's outlier channels over the vector, so they no longer set the scale
  // that the block's other elements are rounded to (SmolLM2's keys: a third of q8_0's KL
  // divergence). Keys are scored in floats against the rotated query, never rounded, as q8_0's
  // are. Appended.
  kQ8_0Had,
};

// How many formats there are: the values of KvDtype are 0 .. kNumKvDtypes - 1, and the table
// (kv_format.cpp) has one row per value, in this order (a static_assert holds it to that). The
// one place that names the last format; everything else counts through all_kv_dtypes().
inline constexpr size_t kNumKvDtypes = static_cast<size_t>(KvDtype::kQ8_0Had) + 1;

// Formats that store H x (H the normalized Walsh-Hadamard matrix, its own inverse) instead of x:
// q . k = (H q) . (H k), and sum p (H v) = H (sum p v), so attention rotates q once and the
// output once instead of every stored vector.
[[nodiscard]] inline bool kv_dtype_rotated(KvDtype dtype) {
  return dtype == KvDtype::kInt4Had || dtype == KvDtype::kInt3Had || dtype == KvDtype::kInt2Had ||
         dtype == KvDtype::kInt8Had || dtype == KvDtype::kInt2Had64 ||
         dtype == KvDtype::kInt2Tcq64 || dtype == KvDtype::kQ8_0Had;
}

// Per-channel key formats that keep a quarter of each group's channels (those of widest range) at
// one bit more than the rest (quant/kv_channel_groups.h): int2mix_chan64.
[[nodiscard]] inline bool kv_dtype_wide_channels(KvDtype dtype) {
  return dtype == KvDtype::kInt2MixChan64;
}

// Formats whose keys are scored as integer dot products against the query quantized to int8
// (kernels/int8_key_dots.h): int8, and int8_had against the rotated query.
[[nodiscard]] inline bool kv_dtype_int8_keys(KvDtype dtype) {
  return dtype == KvDtype::kInt8 || dtype == KvDtype::kInt8Had;
}

struct KvDtypeInfo {
  KvDtype dtype;
  const char* name;             // as typed on the command line: "f16", "fp8_e4m3", "q4_0" ...
  uint32_t group_elems;         // elements per scale group (0 = the whole head vector, or no scale)
  uint32_t group_bytes;         // bytes per group including its scale (for grouped formats)
  uint32_t elem_bits;           // bits per element for ungrouped formats
  uint32_t vector_scale_bytes;  // scale bytes per head vector (per token, per head)
  const char* scale_note;       // human description of the scales
  // Per-channel formats (keys only): tokens per group that share each channel's minimum and
  // step; 0 for the per-vector formats.
  uint32_t channel_group_tokens = 0;
};

// Tokens per group of the per-channel formats (quant/kv_channel_groups.h): 16 for int4_chan,
// int3_chan and int2_chan, 64 for their *_chan64 forms; kMaxChannelGroupTokens bounds both.
inline constexpr uint32_t kChannelGroupTokens = 16;
inline constexpr uint32_t kMaxChannelGroupTokens = 64;

// Formats quantized per channel over groups of tokens: keys only, and the pool's block size must
// be a multiple of the group (kv_channel_group_tokens).
[[nodiscard]] bool kv_dtype_per_channel(KvDtype dtype);
// Tokens per group of a per-channel format; 0 for every other format.
[[nodiscard]] uint32_t kv_channel_group_tokens(KvDtype dtype);

[[nodiscard]] const KvDtypeInfo& kv_dtype_info(KvDtype dtype);
// Every format, in the table's (and the enum's) order.
[[nodiscard]] std::span<const KvDtype, kNumKvDtypes> all_kv_dtypes();
// The format whose KvDtype value is `code` (as stored in a file or a key), or nullopt when no
// format has that value.
[[nodiscard]] std::optional<KvDtype> kv_dtype_from_code(uint64_t code);
[[nodiscard]] const char* kv_dtype_name(KvDtype dtype);
// Accepts every name of kv_dtype_info plus the aliases "fp16", "float16", "float32",
// "bfloat16", "fp8" (= fp8_e4m3), "fp8_dyn" (= fp8_e4m3_dyn). "auto" is resolved by the caller, not
// here.
[[nodiscard]] Result<KvDtype> parse_kv_dtype(std::string_view name);

// Bytes to store one head vector of `dim` elements in `dtype`, scales included (for a
// per-channel format: the average over its group of tokens, which is exact per group).
// Grouped formats need dim % group_elems == 0, per-channel ones dim % 8 == 0 (checked by
// kv_vector_bytes_checked).
[[nodiscard]] uint64_t kv_vector_bytes(KvDtype dtype, uint64_t dim);
[[nodiscard]] Result<uint64_t> kv_vector_bytes_checked(KvDtype dtype, uint64_t dim);

}  // namespace kvs
