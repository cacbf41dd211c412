// Scalar codecs for one K or V head vector in a KV cache format (quant/kv_format.h):
// quantize once when written into the cache, convert back when attention reads it.
// These are the reference; the attention kernel converts in registers where it can.
#pragma once

#include <cstdint>

#include "quant/kv_format.h"

namespace kvs {

// dst[i] = element i of the stored vector, for i in [start, n).
void kv_vector_to_f32(KvDtype dtype, const uint8_t* src, uint32_t n, float* dst, uint32_t start);
// Stores n elements (kv_vector_bytes(dtype, n) bytes).
void kv_vector_from_f32(KvDtype dtype, const float* src, uint32_t n, uint8_t* dst);

}  // namespace kvs
