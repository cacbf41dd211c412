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

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(F16FromF32Rows);

void f16_from_f32_rows(const float* x, size_t n, void* out) {
  HWY_DYNAMIC_DISPATCH(F16FromF32Rows)(x, n, static_cast<uint8_t*>(out));
}

}  // namespace kvs
#endif  // HWY_ONCE
