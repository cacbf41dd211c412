// Rows of f32 stored as f16 (IEEE binary16), as core/half.h's f32_to_f16 stores one value: round
// to nearest even, overflow to +-inf, every NaN as the one quiet NaN 0x7E00 (with its sign). On
// CPUs with F16C the conversion is the hardware's (vcvtps2ph), 8 or 16 values per instruction;
// the bits are the scalar routine's for every input (tests/quant/f16_rows_test.cpp). This is
// what every f16 KV write goes through: the pool's f16 vectors, the recent-token window's rings.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvs {

// The n values f32_to_f16(x[i]) to out, 2 bytes each in the machine's order (as a uint16_t
// array holds them); out needs no alignment.
void f16_from_f32_rows(const float* x, size_t n, void* out);
// The n values f16_to_f32(in[i]) to y (every f16 exactly; with F16C 8 or 16 per instruction): how
// a per-channel key group's f16 tail is read back (kernels/kv_write.cpp).
void f32_from_f16_rows(const void* in, size_t n, float* y);

}  // namespace kvs
