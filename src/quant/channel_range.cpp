#include "quant/channel_range.h"

#include <algorithm>
#include <cstddef>

#include "core/check.h"

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

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(ChannelRangeExtendIn);

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

}  // namespace kvs
#endif  // HWY_ONCE
