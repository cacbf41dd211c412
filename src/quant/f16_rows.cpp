#include "quant/f16_rows.h"

#include <cstring>

#include "core/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/f16_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Highway emulates the f16 demotion where the CPU has no F16C, and that emulation truncates:
// only the hardware instruction rounds as f32_to_f16 does, so other targets keep the scalar
// loop.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kHardwareF16 = true;
#else
constexpr bool kHardwareF16 = false;
#endif

// One value the scalar way, stored bytewise (out may be unaligned).
inline void StoreOne(const float* x, size_t i, uint8_t* out) {
  const uint16_t h = f32_to_f16(x[i]);
  std::memcpy(out + 2 * i, &h, 2);
}

void F16FromF32Rows(const float* HWY_RESTRICT x, size_t n, uint8_t* HWY_RESTRICT out) {
  size_t i = 0;
  if constexpr (kHardwareF16) {
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const size_t N = hn::Lanes(df);
    for (; i + N <= n; i += N) {
      const auto v = hn::LoadU(df, x + i);
      // The hardware keeps a NaN's payload; the scalar routine stores one NaN. NaN never comes
      // from a finite model, so a vector holding one simply takes the scalar loop.
      if (!hn::AllFalse(df, hn::IsNaN(v))) {
        for (size_t j = i; j < i + N; ++j) StoreOne(x, j, out);
        continue;
      }
      hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(out + 2 * i));
    }
  }
  for (; i < n; ++i) StoreOne(x, i, out);
}

// The other way: f16_to_f32 of each value, exact for every f16; the hardware quiets a signaling
// NaN, so a vector holding a NaN takes the scalar loop.
void F32FromF16Rows(const uint8_t* HWY_RESTRICT in, size_t n, float* HWY_RESTRICT y) {
  size_t i = 0;
  if constexpr (kHardwareF16) {
    const hn::ScalableTag<float> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const size_t N = hn::Lanes(df);
    for (; i + N <= n; i += N) {
      const auto v =
          hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(in + 2 * i)));
      if (!hn::AllFalse(df, hn::IsNaN(v))) break;
      hn::StoreU(v, df, y + i);
    }
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    y[i] = f16_to_f32(h);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(F16FromF32Rows);
HWY_EXPORT(F32FromF16Rows);

void f16_from_f32_rows(const float* x, size_t n, void* out) {
  HWY_DYNAMIC_DISPATCH(F16FromF32Rows)(x, n, static_cast<uint8_t*>(out));
}

void f32_from_f16_rows(const void* in, size_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(F32FromF16Rows)(static_cast<const uint8_t*>(in), n, y);
}

}  // namespace kvs
#endif  // HWY_ONCE
