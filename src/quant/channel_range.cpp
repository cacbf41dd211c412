#include "quant/channel_range.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/check.h"
#include "quant/f16_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/channel_range.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// std::min(lo, k) is (k < lo ? k : lo) and std::max(hi, k) is (hi < k ? k : hi): the same
// comparisons and selections per lane, not the ISA's min / max (whose choice between equal
// zeros of either sign differs by instruction).
void ChannelRangeExtendIn(const float* const* rows, uint32_t n, uint32_t dim, float* lo,
                          float* hi) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  size_t c = 0;
  for (; c + L <= dim; c += L) {
    auto vlo = hn::LoadU(df, lo + c), vhi = hn::LoadU(df, hi + c);
    for (uint32_t t = 0; t < n; ++t) {
      const auto k = hn::LoadU(df, rows[t] + c);
      vlo = hn::IfThenElse(hn::Lt(k, vlo), k, vlo);
      vhi = hn::IfThenElse(hn::Lt(vhi, k), k, vhi);
    }
    hn::StoreU(vlo, df, lo + c);
    hn::StoreU(vhi, df, hi + c);
  }
  for (; c < dim; ++c)
    for (uint32_t t = 0; t < n; ++t) {
      lo[c] = std::min(lo[c], rows[t][c]);
      hi[c] = std::max(hi[c], rows[t][c]);
    }
}

// f16 bits h as an int16 whose order is the values' order, +0 and -0 equal: h for h >= 0 (as
// int16), -(h & 0x7FFF) for a negative h. (k < lo ? k : lo) on these keys selects what it does on
// the values (finite and not NaN), and the selection carries the bits, so a zero keeps its sign.
void ChannelRangeF16In(const uint16_t* rows, uint32_t n, uint32_t dim, uint16_t* lo, uint16_t* hi) {
  const hn::ScalableTag<int16_t> di;
  const size_t L = hn::Lanes(di);
  const auto zero = hn::Zero(di), most_negative = hn::Set(di, int16_t{-32768});
  const auto* in = reinterpret_cast<const int16_t*>(rows);
  const auto key = [&](auto h) {
    return hn::IfThenElse(hn::Lt(h, zero), hn::Sub(most_negative, h), h);
  };
  size_t c = 0;
  for (; c + L <= dim; c += L) {
    auto vlo = hn::LoadU(di, in + c), vhi = vlo;
    auto klo = key(vlo), khi = klo;
    for (uint32_t t = 1; t < n; ++t) {
      const auto h = hn::LoadU(di, in + uint64_t{t} * dim + c);
      const auto k = key(h);
      const auto below = hn::Lt(k, klo), above = hn::Lt(khi, k);
      klo = hn::IfThenElse(below, k, klo);
      vlo = hn::IfThenElse(below, h, vlo);
      khi = hn::IfThenElse(above, k, khi);
      vhi = hn::IfThenElse(above, h, vhi);
    }
    hn::StoreU(vlo, di, reinterpret_cast<int16_t*>(lo) + c);
    hn::StoreU(vhi, di, reinterpret_cast<int16_t*>(hi) + c);
  }
  const auto scalar_key = [](uint16_t h) {
    return (h & 0x8000u) ? -static_cast<int32_t>(h & 0x7FFFu) : static_cast<int32_t>(h);
  };
  for (; c < dim; ++c) {
    lo[c] = hi[c] = rows[c];
    for (uint32_t t = 1; t < n; ++t) {
      const uint16_t h = rows[uint64_t{t} * dim + c];
      if (scalar_key(h) < scalar_key(lo[c])) lo[c] = h;
      if (scalar_key(hi[c]) < scalar_key(h)) hi[c] = h;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(ChannelRangeExtendIn);
HWY_EXPORT(ChannelRangeF16In);

void channel_range(const float* const* rows, uint32_t n, uint32_t dim, float* lo, float* hi) {
  KVS_CHECK(n >= 1);
  std::copy_n(rows[0], dim, lo);
  std::copy_n(rows[0], dim, hi);
  HWY_DYNAMIC_DISPATCH(ChannelRangeExtendIn)(rows + 1, n - 1, dim, lo, hi);
}

void channel_range_extend(const float* const* rows, uint32_t n, uint32_t dim, float* lo,
                          float* hi) {
  HWY_DYNAMIC_DISPATCH(ChannelRangeExtendIn)(rows, n, dim, lo, hi);
}

void channel_range_f16(const uint16_t* rows, uint32_t n, uint32_t dim, float* lo, float* hi) {
  KVS_CHECK(n >= 1);
  thread_local std::vector<uint16_t> bits;
  bits.resize(2 * uint64_t{dim});
  HWY_DYNAMIC_DISPATCH(ChannelRangeF16In)(rows, n, dim, bits.data(), bits.data() + dim);
  f32_from_f16_rows(bits.data(), dim, lo);
  f32_from_f16_rows(bits.data() + dim, dim, hi);
}

}  // namespace kvs
#endif  // HWY_ONCE
