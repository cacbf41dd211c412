// The searched-scale formats' candidate fits (quant/scale_fits.h) at the CPU's best SIMD target:
// one candidate scale per lane, each lane adding its element terms in the scalar loop's order,
// so the same bits as scale_fits_scalar. Writing int4, int4_had, int3_had and int2_had vectors
// (kv_vector.cpp) spends most of its time here: about twenty candidates per group of 32.
#pragma once

#include <cstdint>

#include "quant/scale_fits.h"

namespace kvs {

// A ScaleFitsFn: quantize_int4_with / quantize_lowbit_with take it.
void scale_fits(ScaleLevels levels, const float* x, const float* d, uint32_t k, bool refit_sums,
                ScaleFit* out);

}  // namespace kvs
