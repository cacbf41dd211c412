// The codes of a per-channel key group's rows (quant/kv_channel_groups.h), given each channel's
// minimum and step: code = clamp(round_even((x - minimum) x (1 / step)), 0, qmax), 0 where the
// step is 0. In SIMD lanes, one channel per lane, with the scalar definition's operations in its
// order (no fused multiply-add), so the bits are the same on every target
// (tests/quant/channel_codes_test.cpp) and a group's bytes do not depend on the CPU.
#pragma once

#include <cstdint>

namespace kvs {

// The scalar definition, for one element (inverse_step = step > 0 ? 1 / step : 0). Rounding to
// nearest even without a libm call: adding and taking 1.5 x 2^23 leaves no fraction bits for
// |u| < 2^22, and beyond that both land outside [0, qmax] on the same side, which the clamp
// settles alike.
[[nodiscard]] inline uint32_t channel_code_of(float x, float minimum, float inverse_step,
                                              uint32_t qmax) {
  const float u = (x - minimum) * inverse_step;
  const float r = (u + 12582912.0f) - 12582912.0f;
  const float q = r < 0.0f ? 0.0f : (static_cast<float>(qmax) < r ? static_cast<float>(qmax) : r);
  return static_cast<uint32_t>(q);
}

// codes[t x dim + c] = channel_code_of(rows[t][c], minimum[c], inverse_step[c], qmax) for t in
// [0, n), c in [0, dim); qmax <= 255 and every input finite.
void channel_codes(const float* const* rows, uint32_t n, uint32_t dim, const float* minimum,
                   const float* inverse_step, uint32_t qmax, uint8_t* codes);

}  // namespace kvs
