#include "kernels/rope.h"

#include <cmath>

#include "core/check.h"

namespace kvs {

void rope_inplace_reference(float* x, int64_t T, int64_t heads, const int32_t* positions,
                            const RopeConfig& cfg) {
  KVS_CHECK(cfg.rot_dim % 2 == 0 && cfg.rot_dim <= cfg.head_dim);
  const int64_t half = cfg.rot_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * cfg.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = positions[t] * std::pow(static_cast<double>(cfg.freq_base),
                                                     -2.0 * static_cast<double>(i) /
                                                         static_cast<double>(cfg.rot_dim));
        const double c = std::cos(theta), s = std::sin(theta);
        const int64_t ia = cfg.mode == RopeMode::kNormal ? 2 * i : i;
        const int64_t ib = cfg.mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
        const double a = v[ia], b = v[ib];
        v[ia] = static_cast<float>(a * c - b * s);
        v[ib] = static_cast<float>(a * s + b * c);
      }
    }
  }
}

void rope_inplace(float* x, int64_t T, int64_t heads, const int32_t* positions,
                  const RopeConfig& cfg) {
  rope_inplace_reference(x, T, heads, positions, cfg);
}

}  // namespace kvs
