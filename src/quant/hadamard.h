// The normalized Walsh-Hadamard transform, in place: x <- H x / sqrt(n), n a power of two.
// H / sqrt(n) is orthonormal and symmetric, so the transform is its own inverse. Rotating a K/V
// head vector before quantizing spreads a few large channels over all of them, so that they no
// longer set the scale of every group they fall in (kv_format.h: kInt4Had).
#pragma once

#include <cmath>
#include <cstdint>

namespace kvs {

inline void hadamard_inplace(float* x, uint32_t n) {
  for (uint32_t h = 1; h < n; h *= 2)
    for (uint32_t i = 0; i < n; i += 2 * h)
      for (uint32_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = 1.0f / std::sqrt(static_cast<float>(n));
  for (uint32_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace kvs
