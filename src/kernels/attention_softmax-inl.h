// The softmax steps of paged attention (one copy per SIMD target): the largest score of a range,
// the scores turned into exp(score - max) with their sum, and a token's segments merged. Included
// by paged_attention.cpp after kernels/kv_readers-inl.h, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_
#undef KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_
#else
#define KVS_KERNELS_ATTENTION_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "kernels/hadamard_rotation-inl.h"
#include "kernels/paged_attention_args.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF and VF come from kernels/kv_readers-inl.h.

// e^x for the x <= 0 of a softmax (a score minus its row's maximum), within 1 ulp of the exact
// value (tests/kernels/small_kernels_test.cpp): x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two
// parts, as Highway's Exp), e^r by its Taylor polynomial of degree 7 (truncation below 5e-9
// there), times 2^k built in the exponent bits. Below -87 (e^x < 2^-125: beyond any sum's
// precision) it is 0, as -inf. About half the operations of hn::Exp, which also handles the
// positive range and subnormal results a softmax never needs.
static HWY_INLINE VF ExpNonPositive(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  const auto tiny = hn::Lt(x, hn::Set(df, -87.0f));
  const VF k = hn::Round(hn::Mul(x, hn::Set(df, 1.44269504088896341f)));
  VF r = hn::MulAdd(k, hn::Set(df, -0.693145751953125f), x);
  r = hn::MulAdd(k, hn::Set(df, -1.428606765330187045e-6f), r);
  VF p = hn::Set(df, 1.0f / 5040);
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 720));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(df, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(df, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, k), hn::Set(di, 127)));
  return hn::IfThenZeroElse(tiny, hn::Mul(p, hn::BitCast(df, bits)));
}

// In place: x[i] = exp(x[i] - m); returns the sum. The last partial vector goes through the same
// function (padded), so a score's weight does not depend on where its range ends.
static float ExpSubAndSum(float* x, int32_t n, float m) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vm = hn::Set(df, m);
  VF sum = hn::Zero(df);
  int32_t i = 0;
  for (; i + static_cast<int32_t>(L) <= n; i += L) {
    const VF e = ExpNonPositive(df, hn::Sub(hn::LoadU(df, x + i), vm));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  float s = hn::GetLane(hn::SumOfLanes(df, sum));
  if (i < n) {
    HWY_ALIGN float tail[hn::MaxLanes(df)];
    const int32_t rest = n - i;
    for (size_t u = 0; u < L; ++u) tail[u] = static_cast<int32_t>(u) < rest ? x[i + u] : m;
    hn::Store(ExpNonPositive(df, hn::Sub(hn::Load(df, tail), vm)), df, tail);
    for (int32_t u = 0; u < rest; ++u) s += (x[i + u] = tail[u]);
  }
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

// o[i] = acc[i] x f for the D values of one head. Vectors, then the same product for the rest:
// one rounding per value either way.
static HWY_INLINE void ScaleRow(const float* acc, float f, uint32_t D, float* o) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vf = hn::Set(df, f);
  uint32_t i = 0;
  for (; i + L <= D; i += L) hn::StoreU(hn::Mul(hn::LoadU(df, acc + i), vf), df, o + i);
  for (; i < D; ++i) o[i] = acc[i] * f;
}

// Token t's output for kv head kvh from its ns segments' partials (segment-major, seg_stride
// apart), in segment order: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s. Each value is
// fma(w, acc_s, out) per segment (a fused multiply-add where the target has one, as the scalar
// loop it replaces compiled to), then one product by 1 / l.
static void MergeSegments(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, const float* parts,
                          int64_t ns, size_t seg_stride, bool v_rotated) {
  const uint32_t D = a.kv.head_dim;
  const uint32_t group = a.num_heads / a.kv.kv_heads;
  const DF df;
  const size_t L = hn::Lanes(df);
  for (uint32_t g = 0; g < group; ++g) {
    float M = -INFINITY;
    for (int64_t sg = 0; sg < ns; ++sg) M = std::max(M, parts[sg * seg_stride + group * D + g]);
    float* o = a.out + (t * a.num_heads + kvh * group + g) * D;
    std::memset(o, 0, D * sizeof(float));
    float l = 0;
    for (int64_t sg = 0; sg < ns; ++sg) {
      const float* b = parts + sg * seg_stride;
      const float ms = b[group * D + g];
      if (ms == -INFINITY) continue;
      const float w = std::exp(ms - M);
      l += w * b[group * (D + 1) + g];
      const float* acc = b + g * D;
      const VF vw = hn::Set(df, w);
      uint32_t i = 0;
      for (; i + L <= D; i += L)
        hn::StoreU(hn::MulAdd(vw, hn::LoadU(df, acc + i), hn::LoadU(df, o + i)), df, o + i);
      for (; i < D; ++i) o[i] += w * acc[i];
    }
    ScaleRow(o, 1.0f / l, D, o);
    if (v_rotated) HadamardRotate(o, D);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
