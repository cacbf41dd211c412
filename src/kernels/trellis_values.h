// The value pass of paged attention for int2_tcq64 values (quant/kv_trellis_groups.h) on CPUs with
// AVX512-VBMI: a raw-intrinsics kernel in its own translation unit with explicit target flags
// (Highway 1.0.3 compiles no VBMI target by default), chosen at run time from CPUID.
//
// The Highway reader (ReadTrellis, kernels/kv_readers-inl.h) finds each element's level with one
// gather per 16 elements. Here a group's 64 states come from one byte shuffle and one
// vpmultishiftqb, and their 64 levels (kTrellisLevels, int8) from two vpermi2b 128-byte table
// lookups: a tile of keys is decoded to int8 levels first, then summed for every query head.
// Every float is the Highway path's: x = float(level) x (f16 scale / 128), exact, then
// acc = fma(p, x, acc) in key order. So the outputs are the same bits on either path.
#pragma once

#include <cstdint>
#include <optional>

#include "quant/paged_kv_layout.h"

namespace kvs::trellis_values {

// The largest head dim the kernel takes (larger ones take the Highway reader).
inline constexpr uint32_t kMaxHeadDim = 1024;

// One range of keys [j0, j1) of a sequence (its block table `table`), kv head kvh of `layer`:
// out[g * D + e] += sum_j p[g * (j1 - j0) + (j - j0)] * v_j[e] for g < ng (1..4), v_j the
// dequantized int2_tcq64 value of key j, D = kv.head_dim (a multiple of 64, at most
// kMaxHeadDim).
using AccumulateFn = void (*)(const PagedKvLayout& kv, const uint32_t* table, uint32_t layer,
                              uint32_t kvh, int32_t j0, int32_t j1, const float* p, int ng,
                              float* out);

// The AVX512-VBMI kernel (call only where supported() is true).
AccumulateFn accumulate_avx512vbmi();

// Whether this CPU (and OS) can run it: AVX512 F, BW and VBMI, and F16C.
[[nodiscard]] bool supported();

// The kernel paged attention uses, or nullptr for the Highway reader: the VBMI kernel where
// supported, unless the environment variable KVSERVE_TRELLIS_VALUES=highway (read once; for
// benchmarks comparing the two) or a test override (below) says otherwise.
[[nodiscard]] AccumulateFn active();

// Tests: true forces the VBMI kernel (CHECKed to be supported), false the Highway reader;
// nullopt restores the default. Not thread-safe against concurrent attention calls.
void set_for_test(std::optional<bool> vbmi);

}  // namespace kvs::trellis_values
