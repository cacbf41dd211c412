// Scalar codecs for one K or V head vector in a KV cache format (quant/kv_format.h):
// quantize once when written into the cache, convert back when attention reads it.
// These are the reference; the attention kernel converts in registers where it can.
#pragma once

#include <cstdint>

#include "quant/kv_format.h"
#include "quant/paged_kv_layout.h"

namespace kvs {

// dst[i] = element i of the stored vector, for i in [start, n).
void kv_vector_to_f32(KvDtype dtype, const uint8_t* src, uint32_t n, float* dst, uint32_t start);
// Stores n elements (kv_vector_bytes(dtype, n) bytes). Not for the per-channel formats, whose
// keys are written a group of tokens at a time (kernels/kv_write.h).
void kv_vector_from_f32(KvDtype dtype, const float* src, uint32_t n, uint8_t* dst);
// The same bytes in pieces that may run on separate threads (kernels/kv_write.cpp splits a decode
// step's writes so): kv_vector_parts pieces, 1 for every format but int2_tcq64 (its groups of 64,
// whose Viterbi passes are most of its cost). kv_vector_prepare writes the n floats every piece
// reads (int2_tcq64: the rotated vector; others: src); kv_vector_part_from_prepared stores piece
// `part` of the vector at dst, the vector's first byte.
[[nodiscard]] uint32_t kv_vector_parts(KvDtype dtype, uint32_t n);
void kv_vector_prepare(KvDtype dtype, const float* src, uint32_t n, float* prepared);
void kv_vector_part_from_prepared(KvDtype dtype, const float* prepared, uint32_t n, uint32_t part,
                                  uint8_t* dst);
// The key of token slot `offset` of (block, layer, head) in the pool's K format, any format
// (per-channel ones included), in the original (unrotated) space: dst[0, head_dim).
void kv_key_to_f32(const PagedKvLayout& kv, uint64_t block, uint32_t layer, uint32_t head,
                   uint32_t offset, float* dst);

}  // namespace kvs
