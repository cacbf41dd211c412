// Rounding a float to the nearest integer, ties to even, without a libm call: adding and then
// taking 1.5 x 2^23 leaves no fraction bits (the FPU's default rounding mode is nearest even), for
// |v| < 2^22. Every quantizer that rounds this way uses this one definition (the SIMD kernels add
// and take kRoundEvenShift in lanes, the same two operations), so their codes agree bit for bit.
#pragma once

namespace kvs {

inline constexpr float kRoundEvenShift = 12582912.0f;  // 1.5 x 2^23

// v rounded to the nearest integer, ties to even, for |v| < 2^22. Beyond that the result stays
// near v, on its side of 0, far outside every code range: the callers' clamps settle it alike.
[[nodiscard]] inline float round_even(float v) { return (v + kRoundEvenShift) - kRoundEvenShift; }

}  // namespace kvs
