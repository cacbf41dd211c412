// The softmax steps of paged attention (one copy per SIMD target): the largest score of a range,
// and the scores turned into exp(score - max) with their sum. Included by paged_attention.cpp
// after kernels/kv_readers-inl.h, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_
#undef KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_
#else
#define KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstdint>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF and VF come from kernels/kv_readers-inl.h.

// In place: x[i] = exp(x[i] - m); returns the sum.
static float ExpSubAndSum(float* x, int32_t n, float m) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vm = hn::Set(df, m);
  VF sum = hn::Zero(df);
  int32_t i = 0;
  for (; i + static_cast<int32_t>(L) <= n; i += L) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vm));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  float s = hn::GetLane(hn::SumOfLanes(df, sum));
  for (; i < n; ++i) s += (x[i] = std::exp(x[i] - m));
  return s;
}

static float MaxOf(const float* x, int32_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF m = hn::Set(df, -INFINITY);
  int32_t i = 0;
  for (; i + static_cast<int32_t>(L) <= n; i += L) m = hn::Max(m, hn::LoadU(df, x + i));
  float r = hn::GetLane(hn::MaxOfLanes(df, m));
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
