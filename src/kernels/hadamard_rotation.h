// The Hadamard rotation of the rotated KV formats (quant/hadamard.h's transform), at the CPU's
// best SIMD target: for callers outside the Highway kernels (writing and decoding a KV vector).
// The same bits as hadamard_inplace. The attention kernels include hadamard_rotation-inl.h.
#pragma once

#include <cstdint>

namespace kvs {

// x <- H x / sqrt(n), n a power of two.
void hadamard_rotate(float* x, uint32_t n);

}  // namespace kvs
