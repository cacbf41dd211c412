#include "kernels/dequantize.h"

#include <cstring>

#include "core/check.h"
#include "core/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dequantize.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

// Per-target code. Every element is the same single f32 operation(s) as in the reference (d*q,
// d*q + m as a rounded product then a rounded sum, never a fused multiply-add), so results are
// bit-identical to dequantize_row_reference.
HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE float f16_scalar(D /*df*/, const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

// y[0..16) from the low nibbles of qs[0..16), y[16..32) from the high nibbles; x = d*(q-off) + m.
template <bool kHasMin, class D>
HWY_INLINE void q4_block(D df, const uint8_t* HWY_RESTRICT qs, float d, float m, int32_t off,
                         float* HWY_RESTRICT y) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const hn::RebindToUnsigned<D> du;
  constexpr size_t kN = hn::MaxLanes(df);
  const auto vd = hn::Set(df, d), vm = hn::Set(df, m);
  const auto voff = hn::Set(di, off);
  for (size_t j = 0; j < 16; j += kN) {
    const auto u = hn::PromoteTo(du, hn::LoadU(d8, qs + j));
    const auto lo = hn::Sub(hn::BitCast(di, hn::And(u, hn::Set(du, 0x0F))), voff);
    const auto hi = hn::Sub(hn::BitCast(di, hn::ShiftRight<4>(u)), voff);
    auto ylo = hn::Mul(vd, hn::ConvertTo(df, lo));
    auto yhi = hn::Mul(vd, hn::ConvertTo(df, hi));
    if constexpr (kHasMin) {
      ylo = hn::Add(ylo, vm);
      yhi = hn::Add(yhi, vm);
    }
    hn::StoreU(ylo, df, y + j);
    hn::StoreU(yhi, df, y + 16 + j);
  }
}

void DequantizeRow(WeightType type, const void* src, float* HWY_RESTRICT dst, int64_t n) {
  const hn::ScalableTag<float> df;
  constexpr size_t kN = hn::MaxLanes(df);
  static_assert(16 % kN == 0);
  const auto* b = static_cast<const uint8_t*>(src);
  const int64_t nb = n / 32;
  switch (type) {
    case WeightType::kF16: {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      const auto* h = reinterpret_cast<const hwy::float16_t*>(b);
      int64_t i = 0;
      for (; i + static_cast<int64_t>(kN) <= n; i += kN)
        hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + i)), df, dst + i);
      for (; i < n; ++i) dst[i] = f16_scalar(df, b + 2 * i);
      return;
    }
    case WeightType::kBF16: {
      const hn::Rebind<uint16_t, decltype(df)> du16;
      const hn::RebindToUnsigned<decltype(df)> du32;
      const auto* h = reinterpret_cast<const uint16_t*>(b);
      int64_t i = 0;
      for (; i + static_cast<int64_t>(kN) <= n; i += kN) {
        const auto u = hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, h + i)));
        hn::StoreU(hn::BitCast(df, u), df, dst + i);
      }
      for (; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, b + 2 * i, 2);
        dst[i] = bf16_to_f32(v);
      }
      return;
    }
    case WeightType::kQ8_0: {
      const hn::Rebind<int8_t, decltype(df)> d8;
      const hn::RebindToSigned<decltype(df)> di;
      for (int64_t k = 0; k < nb; ++k, b += 34, dst += 32) {
        const auto vd = hn::Set(df, f16_scalar(df, b));
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        for (size_t j = 0; j < 32; j += kN) {
          const auto v = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q + j)));
          hn::StoreU(hn::Mul(vd, v), df, dst + j);
        }
      }
      return;
    }
    case WeightType::kQ4_0:
      for (int64_t k = 0; k < nb; ++k, b += 18, dst += 32)
        q4_block<false>(df, b + 2, f16_scalar(df, b), 0.0f, 8, dst);
      return;
    case WeightType::kQ4_1:
      for (int64_t k = 0; k < nb; ++k, b += 20, dst += 32)
        q4_block<true>(df, b + 4, f16_scalar(df, b), f16_scalar(df, b + 2), 0, dst);
      return;
    default: return;  // other types never reach here (see dequantize_row)
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void deq_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const float d = f16_to_f32(load_u16(b));
    const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]);
  }
}

void deq_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = f16_to_f32(load_u16(b));
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
      y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

void deq_q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    const float d = f16_to_f32(load_u16(b));
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0F) | static_cast<int>((qh >> j) & 1) << 4;
      const int hi = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4;
      y[j] = d * static_cast<float>(lo - 16);
      y[j + 16] = d * static_cast<float>(hi - 16);
    }
  }
}

void deq_q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
    const float d = f16_to_f32(load_u16(b));
    const float m = f16_to_f32(load_u16(b + 2));
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
      y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

void deq_q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    const float d = f16_to_f32(load_u16(b));
    const float dmin = f16_to_f32(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    // 4 groups of 64 elements; each group = 32 bytes of qs: lo nibbles are the first sub-block,
    // hi nibbles the second.
    for (int g = 0; g < 4; ++g, q += 32) {
      int sc0, mn0, sc1, mn1;
      q4k_scale_min(2 * g, scales, &sc0, &mn0);
      q4k_scale_min(2 * g + 1, scales, &sc1, &mn1);
      const float d0 = d * static_cast<float>(sc0), m0 = dmin * static_cast<float>(mn0);
      const float d1 = d * static_cast<float>(sc1), m1 = dmin * static_cast<float>(mn1);
      for (int l = 0; l < 32; ++l) *y++ = d0 * static_cast<float>(q[l] & 0x0F) - m0;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] >> 4) - m1;
    }
  }
}

void deq_q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = f16_to_f32(load_u16(b + 208));
    // 2 halves of 128 elements; each uses 64 bytes of ql, 32 of qh and 8 scales (one per 16).
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is] * q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
      }
    }
  }
}

}  // namespace

void dequantize_row_reference(WeightType type, const void* src, float* dst, int64_t n) {
  const auto& info = weight_type_info(type);
  KVS_CHECK(n % info.block_elems == 0);
  const auto* b = static_cast<const uint8_t*>(src);
  const int64_t nb = n / info.block_elems;
  switch (type) {
    case WeightType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(b + 2 * i));
      return;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(b + 2 * i));
      return;
    case WeightType::kQ8_0: deq_q8_0(b, dst, nb); return;
    case WeightType::kQ4_0: deq_q4_0(b, dst, nb); return;
    case WeightType::kQ4_1: deq_q4_1(b, dst, nb); return;
    case WeightType::kQ4_K: deq_q4_k(b, dst, nb); return;
    case WeightType::kQ6_K: deq_q6_k(b, dst, nb); return;
    case WeightType::kQ5_0: deq_q5_0(b, dst, nb); return;
  }
  KVS_CHECK_MSG(false, "unknown weight type");
}

HWY_EXPORT(DequantizeRow);

void dequantize_row(WeightType type, const void* src, float* dst, int64_t n) {
  KVS_CHECK(n % weight_type_info(type).block_elems == 0);
  switch (type) {
    case WeightType::kF16:
    case WeightType::kBF16:
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1: HWY_DYNAMIC_DISPATCH(DequantizeRow)(type, src, dst, n); return;
    default: dequantize_row_reference(type, src, dst, n); return;
  }
}

}  // namespace kvs
#endif  // HWY_ONCE
