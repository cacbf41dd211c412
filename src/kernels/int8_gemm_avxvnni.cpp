// kernels/int8_gemm.h for AVX-VNNI: vpdpbusd (VEX).
// Compiled with this ISA's target flags (CMakeLists.txt); called only when CPUID reports it.
#define KVS_INT8_NS avxvnni
#define KVS_INT8_VNNI 1
#include "kernels/int8_gemm-inl.h"

namespace kvs::int8_gemm {
const Kernels& kernels_avxvnni() { return avxvnni::kernels(); }
}  // namespace kvs::int8_gemm
