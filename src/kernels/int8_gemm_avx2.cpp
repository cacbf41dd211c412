// kernels/int8_gemm.h for AVX2 + FMA + F16C: vpmaddubsw + vpmaddwd.
// Compiled with this ISA's target flags (CMakeLists.txt); called only when CPUID reports it.
#define KVS_INT8_NS avx2
#define KVS_INT8_VNNI 0
#include "kernels/int8_gemm-inl.h"

namespace kvs::int8_gemm {
const Kernels& kernels_avx2() { return avx2::kernels(); }
}  // namespace kvs::int8_gemm
