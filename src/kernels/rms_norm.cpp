#include "kernels/rms_norm.h"

#include <cmath>

#include "core/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rms_norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RmsNormRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT weight, int64_t rows,
                 int64_t n, float eps, float* out) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    // Two chains hide the FMA latency.
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    int64_t i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      const auto a = hn::LoadU(d, xr + i), b = hn::LoadU(d, xr + i + N);
      s0 = hn::MulAdd(a, a, s0);
      s1 = hn::MulAdd(b, b, s1);
    }
    for (; i + N <= n; i += N) {
      const auto a = hn::LoadU(d, xr + i);
      s0 = hn::MulAdd(a, a, s0);
    }
    float ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
    for (; i < n; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    const auto vs = hn::Set(d, scale);
    i = 0;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, xr + i), vs), hn::LoadU(d, weight + i)), d, o + i);
    for (; i < n; ++i) o[i] = xr[i] * scale * weight[i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(RmsNormRows);

void rms_norm_reference(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  KVS_CHECK(n >= 1);
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, weight, 1, n, eps, out);
}

void rms_norm_rows(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                   float* out) {
  KVS_CHECK(n >= 1);
  HWY_DYNAMIC_DISPATCH(RmsNormRows)(x, weight, rows, n, eps, out);
}

}  // namespace kvs
#endif  // HWY_ONCE
