// The normalized Walsh-Hadamard rotation of quant/hadamard.h, one copy per SIMD target: the
// rotated KV formats (int4_had, int3_had, int2_had, int8_had) rotate each query once per call,
// each finished output back, and each written K/V vector, so at short contexts the scalar
// transform was a tenth of a decode step's attention (SmolLM2, 1K tokens: 540 transforms of 64
// elements per step). The same butterflies in the same order as the scalar one, so the same
// bits (tests/kernels/hadamard_rotation_test.cpp): a rotated format's bytes and attention do
// not depend on the SIMD target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_HADAMARD_ROTATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_HADAMARD_ROTATION_INL_H_
#undef KVS_KERNELS_HADAMARD_ROTATION_INL_H_
#else
#define KVS_KERNELS_HADAMARD_ROTATION_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "quant/hadamard.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// x <- H x / sqrt(n), n a power of two (a head dim). Below one vector, the scalar transform.
static HWY_INLINE void HadamardRotate(float* HWY_RESTRICT x, uint32_t n) {
  const hn::ScalableTag<float> d;
  const size_t L = hn::Lanes(d);
  if (n < L || n % L != 0) {
    hadamard_inplace(x, n);
    return;
  }
  // Butterflies between lanes of one vector (h < L): lane i and its partner i ^ h. The lane with
  // bit h set takes partner - own (the scalar's a - b, a the lower element), the other own +
  // partner. These stages never mix vectors, so each vector goes through all of them at once.
  const hn::RebindToSigned<decltype(d)> di;
  const auto lane = hn::Iota(di, 0);
  for (size_t i = 0; i < n; i += L) {
    auto v = hn::LoadU(d, x + i);
    for (size_t h = 1; h < L; h *= 2) {
      const auto bit = hn::Set(di, static_cast<int32_t>(h));
      const auto partner = hn::TableLookupLanes(v, hn::IndicesFromVec(d, hn::Xor(lane, bit)));
      v = hn::IfThenElse(hn::RebindMask(d, hn::TestBit(lane, bit)), hn::Sub(partner, v),
                         hn::Add(v, partner));
    }
    hn::StoreU(v, d, x + i);
  }
  // Butterflies between whole vectors (h >= L).
  for (size_t h = L; h < n; h *= 2)
    for (size_t i = 0; i < n; i += 2 * h)
      for (size_t j = i; j < i + h; j += L) {
        const auto a = hn::LoadU(d, x + j), b = hn::LoadU(d, x + j + h);
        hn::StoreU(hn::Add(a, b), d, x + j);
        hn::StoreU(hn::Sub(a, b), d, x + j + h);
      }
  const auto s = hn::Set(d, 1.0f / std::sqrt(static_cast<float>(n)));
  for (size_t i = 0; i < n; i += L) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), s), d, x + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // KVS_KERNELS_HADAMARD_ROTATION_INL_H_
