#include "kernels/rope.h"

#include <cmath>

#include "core/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef KVS_KERNELS_ROPE_ONCE
#define KVS_KERNELS_ROPE_ONCE
namespace kvs::rope_detail {

constexpr int64_t kMaxRotDim = 1024;

// The pairs' frequencies base^(-2i/rot_dim), i < rot_dim/2, in double: once per call, not per
// token.
inline void rope_frequencies(const RopeConfig& cfg, double* freq) {
  const int64_t half = cfg.rot_dim / 2;
  const double base = cfg.freq_base;
  for (int64_t i = 0; i < half; ++i)
    freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(cfg.rot_dim));
}

// cos/sin of theta_i = pos * freq[i] for i < rot_dim/2, in double (a position of 100k times a
// frequency near 1 loses too many bits in f32) and rounded once.
// Normal mode wants them per element: c[2i] = c[2i+1] = cos, s[2i] = -sin, s[2i+1] = +sin, so that
// x' = x*c + swap_pairs(x)*s. NeoX mode wants c[i], s[i] per pair.
inline void rope_angles(int32_t pos, const RopeConfig& cfg, const double* freq, float* c,
                        float* s) {
  const int64_t half = cfg.rot_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = pos * freq[i];
    const auto ci = static_cast<float>(std::cos(theta));
    const auto si = static_cast<float>(std::sin(theta));
    if (cfg.mode == RopeMode::kNormal) {
      c[2 * i] = c[2 * i + 1] = ci;
      s[2 * i] = -si;
      s[2 * i + 1] = si;
    } else {
      c[i] = ci;
      s[i] = si;
    }
  }
}

}  // namespace kvs::rope_detail
#endif  // KVS_KERNELS_ROPE_ONCE

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace kvs::rope_detail;  // NOLINT

// Rotates tokens [t0, t1) of x [T][heads] and, when x2 is not null, of x2 [T][heads2] with the
// same angles.
void RopeInplace(float* HWY_RESTRICT x, int64_t heads, float* HWY_RESTRICT x2, int64_t heads2,
                 const RopeAngles& angles, int64_t t0, int64_t t1) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  const RopeConfig& cfg = angles.config();
  const int64_t rot = cfg.rot_dim, half = rot / 2;
  const int64_t all = x2 != nullptr ? heads + heads2 : heads;
  for (int64_t t = t0; t < t1; ++t) {
    const float* c = angles.cos_row(t);
    const float* s = angles.sin_row(t);
    for (int64_t hh = 0; hh < all; ++hh) {
      float* v = hh < heads ? x + (t * heads + hh) * cfg.head_dim
                            : x2 + (t * heads2 + hh - heads) * cfg.head_dim;
      int64_t i = 0;
      if (cfg.mode == RopeMode::kNormal) {
#if HWY_TARGET != HWY_SCALAR
        // Pairs never straddle a 128-bit block, so swapping adjacent lanes is Shuffle2301.
        for (; i + N <= rot; i += N) {
          const auto a = hn::LoadU(d, v + i);
          const auto r =
              hn::MulAdd(hn::Shuffle2301(a), hn::LoadU(d, s + i), hn::Mul(a, hn::LoadU(d, c + i)));
          hn::StoreU(r, d, v + i);
        }
#endif
        for (; i < rot; i += 2) {
          const float a = v[i], b = v[i + 1];
          v[i] = a * c[i] + b * s[i];
          v[i + 1] = b * c[i + 1] + a * s[i + 1];
        }
      } else {
        float* w = v + half;
        for (; i + N <= half; i += N) {
          const auto a = hn::LoadU(d, v + i), b = hn::LoadU(d, w + i);
          const auto ci = hn::LoadU(d, c + i), si = hn::LoadU(d, s + i);
          hn::StoreU(hn::NegMulAdd(b, si, hn::Mul(a, ci)), d, v + i);
          hn::StoreU(hn::MulAdd(a, si, hn::Mul(b, ci)), d, w + i);
        }
        for (; i < half; ++i) {
          const float a = v[i], b = w[i];
          v[i] = a * c[i] - b * s[i];
          w[i] = a * s[i] + b * c[i];
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(RopeInplace);

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

void RopeAngles::compute(const int32_t* positions, int64_t T, const RopeConfig& cfg) {
  KVS_CHECK(cfg.rot_dim % 2 == 0 && cfg.rot_dim >= 2 && cfg.rot_dim <= cfg.head_dim);
  KVS_CHECK(cfg.rot_dim <= rope_detail::kMaxRotDim);
  cfg_ = cfg;
  tokens_ = T;
  c_.resize(static_cast<size_t>(T * cfg.rot_dim));
  s_.resize(c_.size());
  double freq[rope_detail::kMaxRotDim / 2];
  rope_detail::rope_frequencies(cfg, freq);
  for (int64_t t = 0; t < T; ++t)
    rope_detail::rope_angles(positions[t], cfg, freq, c_.data() + t * cfg.rot_dim,
                             s_.data() + t * cfg.rot_dim);
}

void rope_inplace(float* x, int64_t T, int64_t heads, const int32_t* positions,
                  const RopeConfig& cfg) {
  RopeAngles angles;
  angles.compute(positions, T, cfg);
  HWY_DYNAMIC_DISPATCH(RopeInplace)(x, heads, nullptr, 0, angles, 0, T);
}

void rope_inplace_qk(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t T,
                     const int32_t* positions, const RopeConfig& cfg) {
  RopeAngles angles;
  angles.compute(positions, T, cfg);
  rope_inplace_qk(q, q_heads, k, k_heads, angles);
}

void rope_inplace_qk(float* q, int64_t q_heads, float* k, int64_t k_heads,
                     const RopeAngles& angles) {
  rope_inplace_qk(q, q_heads, k, k_heads, angles, 0, angles.tokens());
}

void rope_inplace_qk(float* q, int64_t q_heads, float* k, int64_t k_heads, const RopeAngles& angles,
                     int64_t t0, int64_t t1) {
  KVS_CHECK(0 <= t0 && t0 <= t1 && t1 <= angles.tokens());
  HWY_DYNAMIC_DISPATCH(RopeInplace)(q, q_heads, k, k_heads, angles, t0, t1);
}

}  // namespace kvs
#endif  // HWY_ONCE
