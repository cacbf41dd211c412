#include "quant/scale_fits.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/half.h"
#include "core/round_even.h"

namespace kvs {
namespace {

// The reciprocal each level rule multiplies by.
template <ScaleLevels kLevels>
inline float level_inverse(float d) {
  if constexpr (kLevels == ScaleLevels::kInt4) return d != 0.0f ? 1.0f / d : 0.0f;
  return d > 0 ? 0.5f / d : 0.0f;
}

// Element x's level for scale d: q (-8..7) for kInt4, 2c - top for the low-bit codes; *code
// gets its stored code.
template <ScaleLevels kLevels>
inline float level_of(float x, float inv, uint8_t* code) {
  if constexpr (kLevels == ScaleLevels::kInt4) {
    const float q = round_even(std::clamp(x * inv, -8.0f, 7.0f));
    *code = static_cast<uint8_t>(static_cast<int>(q) + 8);
    return q;
  }
  constexpr int top = kLevels == ScaleLevels::kLowBit3 ? 7 : 3;
  const float c = std::clamp(std::floor(x * inv + 0.5f * float(top + 1)), 0.0f, float(top));
  *code = static_cast<uint8_t>(c);
  return 2.0f * c - float(top);
}

template <ScaleLevels kLevels>
void fits_of(const float* x, const float* d, uint32_t k, bool refit_sums, ScaleFit* out) {
  for (uint32_t c = 0; c < k; ++c) {
    const float inv = level_inverse<kLevels>(d[c]);
    ScaleFit f{};
    for (uint32_t i = 0; i < kScaleFitGroup; ++i) {
      uint8_t code;
      const float l = level_of<kLevels>(x[i], inv, &code);
      const float e = x[i] - d[c] * l;
      f.err += double(e) * e;
      f.worst = std::max(f.worst, std::fabs(e));
      if (refit_sums) {
        f.xl += double(x[i]) * l;
        f.ll += double(l) * l;
      }
    }
    out[c] = f;
  }
}

template <ScaleLevels kLevels>
void codes_of(const float* x, float d, uint8_t* codes) {
  const float inv = level_inverse<kLevels>(d);
  for (uint32_t i = 0; i < kScaleFitGroup; ++i) (void)level_of<kLevels>(x[i], inv, codes + i);
}

}  // namespace

void scale_fits_scalar(ScaleLevels levels, const float* x, const float* d, uint32_t k,
                       bool refit_sums, ScaleFit* out) {
  KVS_CHECK(k <= kMaxScaleFits);
  switch (levels) {
    case ScaleLevels::kInt4: return fits_of<ScaleLevels::kInt4>(x, d, k, refit_sums, out);
    case ScaleLevels::kLowBit2: return fits_of<ScaleLevels::kLowBit2>(x, d, k, refit_sums, out);
    case ScaleLevels::kLowBit3: return fits_of<ScaleLevels::kLowBit3>(x, d, k, refit_sums, out);
  }
}

namespace {

// The fits of d[0..k) to `groups` consecutive groups of x, summed over them in order.
void group_fits(ScaleLevels levels, const float* x, const float* d, uint32_t k, bool refit_sums,
                uint32_t groups, ScaleFitsFn fits, ScaleFit* out) {
  fits(levels, x, d, k, refit_sums, out);
  for (uint32_t g = 1; g < groups; ++g) {
    ScaleFit more[kMaxScaleFits];
    fits(levels, x + uint64_t{g} * kScaleFitGroup, d, k, refit_sums, more);
    for (uint32_t c = 0; c < k; ++c) {
      out[c].err += more[c].err;
      out[c].worst = std::max(out[c].worst, more[c].worst);
      out[c].xl += more[c].xl;
      out[c].ll += more[c].ll;
    }
  }
}

}  // namespace

float search_scale(ScaleLevels levels, const float* x, const float* d, uint32_t k, float limit,
                   ScaleFitsFn fits, uint32_t groups) {
  KVS_CHECK(k >= 1 && k <= kMaxScaleFits && groups >= 1);
  constexpr float kF16Max = 65504.0f;
  const bool positive = levels != ScaleLevels::kInt4;
  // Every candidate's fit, then every refit's: each fit depends on its scale alone.
  ScaleFit fit[kMaxScaleFits], refit[kMaxScaleFits];
  float refit_d[kMaxScaleFits];
  int32_t refit_of[kMaxScaleFits];  // candidate c's refit, or -1
  group_fits(levels, x, d, k, true, groups, fits, fit);
  uint32_t refits = 0;
  for (uint32_t c = 0; c < k; ++c) {
    const ScaleFit& f = fit[c];
    refit_of[c] = -1;
    if (f.ll > 0 && std::isfinite(f.xl) && (!positive || f.xl > 0)) {
      refit_of[c] = static_cast<int32_t>(refits);
      const float r =
          std::clamp(static_cast<float>(f.xl / f.ll), positive ? 0.0f : -kF16Max, kF16Max);
      refit_d[refits++] = f16_to_f32(f32_to_f16(r));
    }
  }
  group_fits(levels, x, refit_d, refits, false, groups, fits, refit);
  float best_d = d[0];
  double best = fit[0].err;
  const auto consider = [&](float dc, const ScaleFit& f) {
    if (f.err < best && f.worst <= limit) {
      best = f.err;
      best_d = dc;
    }
  };
  for (uint32_t c = 0; c < k; ++c) {
    if (c > 0) consider(d[c], fit[c]);
    if (refit_of[c] >= 0) consider(refit_d[refit_of[c]], refit[refit_of[c]]);
  }
  return best_d;
}

void scale_level_codes(ScaleLevels levels, const float* x, float d, uint8_t* codes) {
  switch (levels) {
    case ScaleLevels::kInt4: return codes_of<ScaleLevels::kInt4>(x, d, codes);
    case ScaleLevels::kLowBit2: return codes_of<ScaleLevels::kLowBit2>(x, d, codes);
    case ScaleLevels::kLowBit3: return codes_of<ScaleLevels::kLowBit3>(x, d, codes);
  }
}

}  // namespace kvs
