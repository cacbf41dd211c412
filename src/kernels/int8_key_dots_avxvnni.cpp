// kernels/int8_key_dots.h for AVX-VNNI (VEX): 256-bit vpdpbusd, one per 32 key bytes.
// Compiled with this ISA's target flags (CMakeLists.txt); called only when CPUID reports it.
#define KVS_KD_NS avxvnni
#define KVS_KD_VNNI 1
#include "kernels/int8_key_dots-inl.h"

namespace kvs::int8_key_dots {
const Kernels& kernels_avxvnni() { return avxvnni::kernels(); }
}  // namespace kvs::int8_key_dots
