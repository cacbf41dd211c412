// int2_tcq64's Viterbi passes (quant/kv_trellis_groups.h) at the CPU's best SIMD target: the 256
// states' costs in lanes, each lane doing the scalar loop's operations in its order, so the same
// bits as trellis_forward_scalar and the same stored bytes on every target. Writing an int2_tcq64
// vector is ten passes per group of 64 (five scales, two passes each): most of its time.
#pragma once

#include <cstdint>

#include "quant/kv_trellis_groups.h"

namespace kvs {

// A TrellisForwardFn: quantize_trellis_with takes it.
void trellis_forward(const float* x, int context, float* cost, uint64_t* back);

}  // namespace kvs
