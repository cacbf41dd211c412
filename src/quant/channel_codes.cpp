#include "quant/channel_codes.h"

#include <cstddef>

#include "core/check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/channel_codes.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// channel_code_of per lane: a subtraction and a multiplication (not fused), the 1.5 x 2^23 round
// trip, then the clamp's two comparisons and selections, and a conversion of an integral float.
void ChannelCodesIn(const float* const* rows, uint32_t n, uint32_t dim, const float* minimum,
                    const float* inverse_step, uint32_t qmax, uint8_t* codes) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const size_t L = hn::Lanes(df);
  const auto magic = hn::Set(df, kRoundEvenShift);
  const auto zero = hn::Zero(df);
  const auto top = hn::Set(df, static_cast<float>(qmax));
  size_t c = 0;
  for (; c + L <= dim; c += L) {
    const auto mn = hn::LoadU(df, minimum + c), inv = hn::LoadU(df, inverse_step + c);
    for (uint32_t t = 0; t < n; ++t) {
      const auto u = hn::Mul(hn::Sub(hn::LoadU(df, rows[t] + c), mn), inv);
      auto r = hn::Sub(hn::Add(u, magic), magic);
      r = hn::IfThenElse(hn::Lt(r, zero), zero, r);
      r = hn::IfThenElse(hn::Lt(top, r), top, r);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, codes + uint64_t{t} * dim + c);
    }
  }
  for (; c < dim; ++c)
    for (uint32_t t = 0; t < n; ++t)
      codes[uint64_t{t} * dim + c] =
          static_cast<uint8_t>(channel_code_of(rows[t][c], minimum[c], inverse_step[c], qmax));
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(ChannelCodesIn);

void channel_codes(const float* const* rows, uint32_t n, uint32_t dim, const float* minimum,
                   const float* inverse_step, uint32_t qmax, uint8_t* codes) {
  KVS_CHECK(qmax <= 255);
  HWY_DYNAMIC_DISPATCH(ChannelCodesIn)(rows, n, dim, minimum, inverse_step, qmax, codes);
}

}  // namespace kvs
#endif  // HWY_ONCE
