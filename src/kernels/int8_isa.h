// The instruction sets of the 8-bit integer matmul path (kernels/int8_gemm.h), chosen at run time
// from CPUID. Highway 1.0.3 has no u8 x s8 dot product, so these kernels are raw intrinsics in
// translation units compiled with explicit target flags (never -march=native); every other CPU
// runs the Highway int16 path of kernels/matmul.cpp.
//
//   kAvx512Vnni  vpdpbusd (AVX512-VNNI, EVEX, 256-bit vectors)    int8_gemm_avx512vnni.cpp
//   kAvxVnni     vpdpbusd (AVX-VNNI, VEX)                          int8_gemm_avxvnni.cpp
//   kAvx2        vpmaddubsw + vpmaddwd (AVX2 + FMA + F16C)         int8_gemm_avx2.cpp
//   kNone        the Highway int16 (pmaddwd) path
//
// All four produce bit-identical results (see matmul.h): the same exact int32 block sums,
// converted and accumulated in the same order.
#pragma once

#include <cstdint>
#include <optional>

namespace kvs {

enum class Int8Isa : uint8_t { kNone, kAvx2, kAvxVnni, kAvx512Vnni };

constexpr Int8Isa kAllInt8Isas[] = {Int8Isa::kNone, Int8Isa::kAvx2, Int8Isa::kAvxVnni,
                                    Int8Isa::kAvx512Vnni};

const char* int8_isa_name(Int8Isa isa);

// True when this CPU (and OS: CPUID + XGETBV) can run `isa`. kNone is always supported.
[[nodiscard]] bool int8_isa_supported(Int8Isa isa);

// The ISA matmul() uses for every step: the best VNNI ISA the CPU has (AVX512-VNNI > AVX-VNNI),
// else kAvx2 on CPUs with AVX2, else kNone. The environment variable KVSERVE_INT8_ISA (an
// int8_isa_name, or "none"), read once, overrides that; a test override (below) overrides both.
[[nodiscard]] Int8Isa int8_isa_active();

// Tests and benchmarks: force matmul() onto `isa` (CHECKed to be supported); nullopt restores the
// CPUID choice. Not thread-safe against concurrent matmul() calls.
void set_int8_isa_for_test(std::optional<Int8Isa> isa);

}  // namespace kvs
