// How well one group's candidate scales fit it: the inner loop of the searched-scale formats
// (int4, int4_had: kv_codecs.h; int3_had, int2_had: kv_lowbit_groups.h). Each group of 32
// elements tries about twenty f16 scales (a few fixed candidates, then a least-squares refit of
// each) and keeps the best, so quantizing it is twenty passes over its elements.
//
// This file states what one candidate's fit is, with the scalar loop that defines it. The
// quantizers take the loop as a parameter: kernels/scale_fits.h runs the same loop with one
// candidate per SIMD lane, each lane adding its element terms in the scalar loop's order, so it
// gives the same bits (tests/kernels/scale_fits_test.cpp) and the stored bytes do not depend on
// the SIMD target.
#pragma once

#include <cstdint>

namespace kvs {

inline constexpr uint32_t kScaleFitGroup = 32;  // elements per group (int4 and the low-bit codes)
inline constexpr uint32_t kMaxScaleFits = 16;   // candidates per call at most

// The levels a scale d stands for.
//   kInt4:    d x q, q = round_even(clamp(x / d, -8, 7))        (llama.cpp's q4_0 block)
//   kLowBitN: d x (2c - (2^N - 1)), c = clamp(floor(x / 2d + 2^(N-1)), 0, 2^N - 1), for d > 0
enum class ScaleLevels : uint8_t { kInt4, kLowBit2, kLowBit3 };

struct ScaleFit {
  double err;   // sum of squared element errors, added in element order
  float worst;  // largest |element error|
  double xl;    // sum x l and sum l^2 over the elements (l the element's level, -8..7 for
  double ll;    // int4, 2c - (2^N - 1) for the low-bit codes): the refit is xl / ll
};

// The fits of the scales d[0..k) (k <= kMaxScaleFits, each already an f16 value) to the finite
// group x[0..kScaleFitGroup). Each sum is a double added element by element in order, each term
// a product of floats (exact in double). xl and ll are left 0 unless `refit_sums` (a refit's own
// fit needs no further refit).
using ScaleFitsFn = void (*)(ScaleLevels levels, const float* x, const float* d, uint32_t k,
                             bool refit_sums, ScaleFit* out);

// The scalar loop: the definition.
void scale_fits_scalar(ScaleLevels levels, const float* x, const float* d, uint32_t k,
                       bool refit_sums, ScaleFit* out);

// The searched scale of the group x (finite): fits each candidate d[0..k) (f16 values), then the
// least-squares refit of each, d* = xl / ll as an f16 (when ll > 0 and xl is finite, and for the
// low-bit codes, whose d is positive, xl > 0). Going through them in order, each candidate then
// its refit, it keeps the first and then any whose error is smaller and whose largest element
// error is <= limit. Returns the kept scale. With `groups` > 1 the scale is one for x's `groups`
// consecutive groups (int2_had64): each fit is the groups' fits summed in order (largest error:
// the largest of them).
[[nodiscard]] float search_scale(ScaleLevels levels, const float* x, const float* d, uint32_t k,
                                 float limit, ScaleFitsFn fits, uint32_t groups = 1);

// The group's level codes for scale d (what the quantizers store for the chosen one): q + 8
// (0..15) for kInt4, c for the low-bit codes.
void scale_level_codes(ScaleLevels levels, const float* x, float d, uint8_t* codes);

}  // namespace kvs
