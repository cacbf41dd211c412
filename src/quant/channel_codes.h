// The codes of a per-channel key group's rows (quant/kv_channel_groups.h), given each channel's
// minimum and step: code = clamp(round_even((x - minimum) x (1 / step)), 0, qmax), 0 where the
// step is 0. In SIMD lanes, one channel per lane, with the scalar definition's operations in its
// order (no fused multiply-add), so the bits are the same on every target
// (tests/quant/channel_codes_test.cpp) and a group's bytes do not depend on the CPU.
#pragma once

#include <cstdint>

#include "core/round_even.h"

namespace kvs {

// The scalar definition, for one element (inverse_step = step > 0 ? 1 / step : 0), rounded to
// nearest even by core/round_even.h (beyond its range the clamp settles both sides alike).
[[nodiscard]] inline uint32_t channel_code_of(float x, float minimum, float inverse_step,
                                              uint32_t qmax) {
  const float r = round_even((x - minimum) * inverse_step);
  const float q = r < 0.0f ? 0.0f : (static_cast<float>(qmax) < r ? static_cast<float>(qmax) : r);
  return static_cast<uint32_t>(q);
}

// codes[t x dim + c] = channel_code_of(rows[t][c], minimum[c], inverse_step[c], qmax) for t in
// [0, n), c in [0, dim); qmax <= 255 and every input finite.
void channel_codes(const float* const* rows, uint32_t n, uint32_t dim, const float* minimum,
                   const float* inverse_step, uint32_t qmax, uint8_t* codes);

}  // namespace kvs
