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

// Whether steps of one token (decode's matrix-vector products) prefetch the weights in software,
// as steps of 2+ tokens always do. It depends on the CPU's hardware prefetchers, so it is chosen
// per CPU from what was measured there (docs/kernels.md, "Prefetch"): on for AMD family 0x1A and
// later (Zen 5: single-stream decode 12-29% faster), off elsewhere (Zen 4: the LM head streamed a
// quarter slower with it; Intel not measured with it). KVSERVE_INT8_PREFETCH_1TOKEN=0|1, read
// once, overrides that; a test override (below) overrides both. The bits never depend on it.
[[nodiscard]] bool int8_prefetch_one_token();

// Tests: force the choice above; nullopt restores it.
void set_int8_prefetch_one_token_for_test(std::optional<bool> on);

}  // namespace kvs
