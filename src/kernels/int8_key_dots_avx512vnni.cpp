// kernels/int8_key_dots.h for AVX512-VNNI + BW: 512-bit vpdpbusd, one per 64 key bytes.
// Compiled with this ISA's target flags (CMakeLists.txt); called only when CPUID reports it.
#define KVS_KD_NS avx512vnni
#define KVS_KD_VNNI 2
#include "kernels/int8_key_dots-inl.h"

namespace kvs::int8_key_dots {
const Kernels& kernels_avx512vnni() { return avx512vnni::kernels(); }
}  // namespace kvs::int8_key_dots
