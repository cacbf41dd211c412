#include "kernels/argmax.h"

#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/argmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Each running maximum takes x only where x > m, so a NaN (which compares false) never enters
// one, on every target alike (hn::Max leaves NaN to the platform).
int32_t Argmax(const float* HWY_RESTRICT x, int32_t n) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int32_t>(hn::Lanes(d));
  const auto take = [](auto v, auto m) { return hn::IfThenElse(hn::Gt(v, m), v, m); };
  const auto low = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto m0 = low, m1 = low, m2 = low, m3 = low;
  int32_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    m0 = take(hn::LoadU(d, x + i), m0);
    m1 = take(hn::LoadU(d, x + i + N), m1);
    m2 = take(hn::LoadU(d, x + i + 2 * N), m2);
    m3 = take(hn::LoadU(d, x + i + 3 * N), m3);
  }
  for (; i + N <= n; i += N) m0 = take(hn::LoadU(d, x + i), m0);
  // No lane holds NaN, so the largest lane is a plain maximum.
  float best = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const auto want = hn::Set(d, best);
  int32_t k = 0;
  for (; k + N <= n; k += N) {
    const intptr_t first = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + k), want));
    if (first >= 0) return k + static_cast<int32_t>(first);
  }
  for (; k < n; ++k)
    if (x[k] == best) return k;
  return 0;  // every logit NaN
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(Argmax);

int32_t argmax(const float* logits, int32_t n) { return HWY_DYNAMIC_DISPATCH(Argmax)(logits, n); }

}  // namespace kvs
#endif  // HWY_ONCE
