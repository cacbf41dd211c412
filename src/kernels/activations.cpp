#include "kernels/activations.h"

#include <cmath>

#include "core/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activations.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

// After highway.h (per-target re-inclusion), hence its own include block.
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// hn::Exp is specified for inputs <= 88 (exp(88.7) overflows f32); clamping keeps silu of very
// negative gates at a tiny finite value (|silu(g)| < 1e-36 there) instead of NaN.
void SiluMul(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f), hi = hn::Set(d, 88.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto e = hn::Exp(d, hn::Min(hn::Neg(g), hi));
    const auto s = hn::Div(g, hn::Add(one, e));
    hn::StoreU(hn::Mul(s, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (torch's approximate="tanh").
// hn::Tanh saturates to +-1 for large arguments, so any finite gate is safe.
void GeluTanhMul(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, int64_t n,
                 float* out) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const auto k0 = hn::Set(d, 0.7978845608028654f), k1 = hn::Set(d, 0.044715f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto inner = hn::Mul(k0, hn::MulAdd(hn::Mul(k1, g), hn::Mul(g, g), g));
    const auto gelu = hn::Mul(hn::Mul(half, g), hn::Add(one, hn::Tanh(d, inner)));
    hn::StoreU(hn::Mul(gelu, hn::LoadU(d, up + i)), d, out + i);
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    out[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
  }
}

void Softmax(float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  float mx = x[0];
  int64_t i = 0;
  if (n >= N) {
    auto vmax = hn::LoadU(d, x);
    for (i = N; i + N <= n; i += N) vmax = hn::Max(vmax, hn::LoadU(d, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
  }
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  const auto vmx = hn::Set(d, mx);
  auto vsum = hn::Zero(d);
  float sum = 0.0f;
  for (i = 0; i + N <= n; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmx));
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  sum += hn::GetLane(hn::SumOfLanes(d, vsum));
  const float inv = 1.0f / sum;
  const auto vinv = hn::Set(d, inv);
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, x + i);
  for (; i < n; ++i) x[i] *= inv;
}

void AddInplace(float* HWY_RESTRICT x, const float* HWY_RESTRICT y, int64_t n) {
  const hn::ScalableTag<float> d;
  const auto N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Add(hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, x + i);
  for (; i < n; ++i) x[i] += y[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(SiluMul);
HWY_EXPORT(GeluTanhMul);
HWY_EXPORT(Softmax);
HWY_EXPORT(AddInplace);

void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void gelu_tanh_mul_reference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double inner = std::sqrt(2.0 / 3.14159265358979323846) * (g + 0.044715 * g * g * g);
    out[i] = static_cast<float>(0.5 * g * (1.0 + std::tanh(inner)) * up[i]);
  }
}

void softmax_inplace_reference(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
}

void add_inplace_reference(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMul)(gate, up, n, out);
}
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(GeluTanhMul)(gate, up, n, out);
}
void gated_activation(GateActivation act, const float* gate, const float* up, int64_t n,
                      float* out) {
  if (act == GateActivation::kGeluTanh) {
    gelu_tanh_mul(gate, up, n, out);
  } else {
    silu_mul(gate, up, n, out);
  }
}
void softmax_inplace(float* x, int64_t n) {
  KVS_CHECK(n >= 1);
  HWY_DYNAMIC_DISPATCH(Softmax)(x, n);
}
void add_inplace(float* x, const float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(AddInplace)(x, y, n); }

}  // namespace kvs
#endif  // HWY_ONCE
