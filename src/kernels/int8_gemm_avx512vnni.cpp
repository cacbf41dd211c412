// kernels/int8_gemm.h for AVX512-VNNI + VL + BW: vpdpbusd (EVEX, 256-bit vectors).
// Compiled with this ISA's target flags (CMakeLists.txt); called only when CPUID reports it.
#define KVS_INT8_NS avx512vnni
#define KVS_INT8_VNNI 2
#include "kernels/int8_gemm-inl.h"

namespace kvs::int8_gemm {
const Kernels& kernels_avx512vnni() { return avx512vnni::kernels(); }
}  // namespace kvs::int8_gemm
