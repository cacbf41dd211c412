// kernels/int8_gemm.h for AVX512-VNNI + VL + BW: vpdpbusd (EVEX, 256-bit vectors).
// Compiled with this ISA's target flags (CMakeLists.txt); called only when CPUID reports it.
// GCC 12 reports the _mm512_undefined_ps() inside its own _mm512_cvtepi32_ps as "may be used
// uninitialized" once inlined (a false positive: the masked-off source is never read).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVS_INT8_NS avx512vnni
#define KVS_INT8_VNNI 2
#include "kernels/int8_gemm-inl.h"

namespace kvs::int8_gemm {
const Kernels& kernels_avx512vnni() { return avx512vnni::kernels(); }
}  // namespace kvs::int8_gemm
