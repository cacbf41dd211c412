// Format readers for the attention kernel: each KV cache format's stored bytes widened to f32
// lanes in registers (Highway, one copy per SIMD target). Included by paged_attention.cpp
// after hwy/highway.h, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_KV_READERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_KV_READERS_INL_H_
#undef KVS_KERNELS_KV_READERS_INL_H_
#else
#define KVS_KERNELS_KV_READERS_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "quant/kv_channel_groups.h"
#include "quant/kv_codecs.h"
#include "quant/kv_lowbit_groups.h"
#include "quant/kv_trellis_groups.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- Format readers ---------------------------------------------------------------------------
// Each reader converts Lanes(df) consecutive elements of one stored K/V vector to f32 lanes in
// registers, WITHOUT the vector's (or group's) scale; Scale() gives the factor that turns those
// lanes into values. The kernel applies the scale once per vector (per group for grouped
// formats) to the dot product or to the softmax weight, never per element.
//
// Ungrouped readers: Load(df, vec, i) for elements [i, i + L); Scale(vec, D) = kFactor (a
// constant of the format) times, where kVectorScale, the f16 scale stored after the vector.
// Grouped readers (kGroupElems elements per group: 32, or 64 for int2_had64 and int2_tcq64):
// Load(df, group, e) for elements [e, e + L) of the group, e a multiple of L < kGroupElems (needs L
// <= 16); Scale(group).

// One f16 scale as f32, converted by the hardware where it can (F16C), not bit by bit.
static HWY_INLINE float F16At(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// What every ungrouped reader shares: a constant factor of the format (kFactor) and, where
// kVectorScale, the f16 scale stored right after the vector's D elements. Scale() is derived
// from the two, so a reader only says which it has.
template <bool kHasVectorScale, int kFactorTimes = 1>
struct Ungrouped {
  static constexpr bool kGrouped = false;
  static constexpr float kFactor = static_cast<float>(kFactorTimes);
  static constexpr bool kVectorScale = kHasVectorScale;
  static HWY_INLINE float Scale(const uint8_t* v, uint32_t D) {
    if constexpr (kHasVectorScale) {
      return kFactor * F16At(v + D);
    } else {
      (void)v, (void)D;
      return kFactor;
    }
  }
};

struct ReadF32 : Ungrouped<false> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    return hn::LoadU(df, reinterpret_cast<const float*>(v) + i);
  }
};

struct ReadF16 : Ungrouped<false> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(v) + i));
  }
};

struct ReadBF16 : Ungrouped<false> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(v) + i));
  }
};

// fp8 bytes widened to f16 bit patterns, then converted by the f16 path (exact for every code,
// subnormals included, with no f32 denormal ever formed).
//   e5m2: the byte is the top half of an f16.
//   e4m3: S.EEEE.MMM -> S.0EEEE.MMM0000000 is the f16 of value * 2^-8 (bias 15 vs 7), so the
//         scale carries the 2^8.
static HWY_INLINE VF Fp8BitsToF32(DF df, hn::Vec<hn::Rebind<uint16_t, DF>> bits) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::BitCast(dh, bits));
}
static HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> LoadBytesAsU16(DF, const uint8_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<uint8_t, DF> du8;
  return hn::PromoteTo(du16, hn::LoadU(du8, p));
}
// Sign-extending the byte puts its sign in bits 15..8; shifted left by 7, bit 15 is the sign,
// bits 13..7 are EEEE.MMM and bit 14 (a second copy of the sign) is cleared: three operations
// per vector instead of two masks, two shifts and an or.
static HWY_INLINE VF LoadE4M3(DF df, const uint8_t* p) {
  const hn::Rebind<int16_t, DF> di16;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<int8_t, DF> di8;
  const auto s = hn::PromoteTo(di16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p)));
  const auto bits = hn::And(hn::BitCast(du16, hn::ShiftLeft<7>(s)), hn::Set(du16, 0xBF80));
  return Fp8BitsToF32(df, bits);
}
constexpr float kE4M3Fix = 256.0f;

struct ReadFp8E4M3 : Ungrouped<false, static_cast<int>(kE4M3Fix)> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) { return LoadE4M3(df, v + i); }
};

struct ReadFp8E5M2 : Ungrouped<false> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    return Fp8BitsToF32(df, hn::ShiftLeft<8>(LoadBytesAsU16(df, v + i)));
  }
};

struct ReadFp8E4M3Dyn : Ungrouped<true, static_cast<int>(kE4M3Fix)> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) { return LoadE4M3(df, v + i); }
};

struct ReadInt8 : Ungrouped<true> {
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    const hn::Rebind<int32_t, DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    return hn::ConvertTo(
        df, hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(v) + i)));
  }
};

struct ReadQ4 {  // int4 and q4_0
  static constexpr bool kGrouped = true;
  static constexpr uint32_t kGroupElems = GroupQ4Traits::kGroup;
  static constexpr uint32_t kGroupBytes = GroupQ4Traits::kGroupBytes;
  static HWY_INLINE VF Load(DF df, const uint8_t* g, size_t e) {
    const hn::Rebind<uint32_t, DF> du32;
    const hn::Rebind<int32_t, DF> di32;
    const hn::Rebind<uint8_t, DF> du8;
    const auto w = hn::PromoteTo(du32, hn::LoadU(du8, g + 2 + (e & 15)));
    const auto nib = e < 16 ? hn::And(w, hn::Set(du32, 0x0F)) : hn::ShiftRight<4>(w);
    return hn::ConvertTo(df, hn::Sub(hn::BitCast(di32, nib), hn::Set(di32, 8)));
  }
  static HWY_INLINE float Scale(const uint8_t* g) { return F16At(g); }
};

struct ReadQ8 {  // q8_0
  static constexpr bool kGrouped = true;
  static constexpr uint32_t kGroupElems = GroupQ8Traits::kGroup;
  static constexpr uint32_t kGroupBytes = GroupQ8Traits::kGroupBytes;
  static HWY_INLINE VF Load(DF df, const uint8_t* g, size_t e) {
    const hn::Rebind<int32_t, DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    return hn::ConvertTo(
        df, hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(g + 2) + e)));
  }
  static HWY_INLINE float Scale(const uint8_t* g) { return F16At(g); }
};

// int3_had, int2_had and int2_had64 (quant/kv_lowbit_groups.h): code c of a group's element is
// the level 2c - (2^kBits - 1), times the group's f16 scale. Lanes e .. e + L (L dividing 16) lie
// in one 32-bit word of each bit plane; each lane shifts it by its element's position. A 64-element
// group's 2-bit plane is two 32-element planes one after the other, so word e / 16 holds lane e.
template <uint32_t kBits, uint32_t kElems = kLowBitGroup>
struct ReadLowBit {
  static constexpr bool kGrouped = true;
  static constexpr uint32_t kGroupElems = kElems;
  static constexpr uint32_t kGroupBytes = lowbit_group_bytes(kBits, kElems);
  static HWY_INLINE VF Load(DF df, const uint8_t* g, size_t e) {
    const hn::Rebind<uint32_t, DF> du32;
    const hn::Rebind<int32_t, DF> di32;
    uint32_t low;
    std::memcpy(&low, g + 2 + 4 * (e / 16), 4);
    const auto at = hn::Iota(du32, static_cast<uint32_t>(e % 16));
    auto c = hn::And(hn::Shr(hn::Set(du32, low), hn::Add(at, at)), hn::Set(du32, 3));
    if constexpr (kBits == 3) {
      uint32_t high;
      std::memcpy(&high, g + 10, 4);
      const auto bit = hn::Shr(hn::Set(du32, high), hn::Iota(du32, static_cast<uint32_t>(e)));
      c = hn::Or(c, hn::ShiftLeft<2>(hn::And(bit, hn::Set(du32, 1))));
    }
    const auto level = hn::Sub(hn::BitCast(di32, hn::Add(c, c)),
                               hn::Set(di32, static_cast<int32_t>((1u << kBits) - 1)));
    return hn::ConvertTo(df, level);
  }
  static HWY_INLINE float Scale(const uint8_t* g) { return F16At(g); }
};

// int2_tcq64 (quant/kv_trellis_groups.h): element i's state is the 8 bits of the group's 128-bit
// plane from bit p = 2 (63 - i), wrapping from bit 127 to bit 0; it stands for the level
// kTrellisLevels[state] times the group's f16 scale times kTrellisLevelUnit. Each lane picks the
// two plane bytes that hold its window (bytes p / 8 and p / 8 + 1 mod 16) with one byte shuffle,
// the plane being broadcast to every 128-bit block, shifts them by p % 8, and gathers its level.
// (Looking the level's two parts up with two more byte shuffles instead, quant/trellis_codebook.h,
// was slower on the AVX-512 Xeon: docs/kv-quantization.md.)
struct ReadTrellis {
  static constexpr bool kGrouped = true;
  static constexpr uint32_t kGroupElems = kTrellisGroup;
  static constexpr uint32_t kGroupBytes = kTrellisGroupBytes;
  static HWY_INLINE VF Load(DF df, const uint8_t* g, size_t e) {
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(df, kTrellisLevelsF32.v[trellis_state(g, static_cast<uint32_t>(e))]);
#else
    const hn::Rebind<uint32_t, DF> du32;
    const hn::Rebind<int32_t, DF> di32;
    const hn::Repartition<uint8_t, DF> du8;
    const auto plane = hn::LoadDup128(du8, g + 2);
    const auto p = hn::ShiftLeft<1>(
        hn::Sub(hn::Set(du32, kTrellisGroup - 1), hn::Iota(du32, static_cast<uint32_t>(e))));
    const auto byte = hn::ShiftRight<3>(p);
    const auto next = hn::And(hn::Add(byte, hn::Set(du32, 1)), hn::Set(du32, 15));
    // An index byte with its high bit set reads as zero: each lane keeps bytes 0 (and 1) only.
    const auto index = hn::Or(hn::Or(byte, hn::ShiftLeft<8>(next)), hn::Set(du32, 0x80800000u));
    const auto window = hn::BitCast(du32, hn::TableLookupBytesOr0(plane, hn::BitCast(du8, index)));
    const auto state = hn::And(hn::Shr(window, hn::And(p, hn::Set(du32, 7))), hn::Set(du32, 0xFF));
    return hn::GatherIndex(df, kTrellisLevelsF32.v, hn::BitCast(di32, state));
#endif
  }
  static HWY_INLINE float Scale(const uint8_t* g) { return F16At(g) * kTrellisLevelUnit; }
};

// Rows of the per-channel key formats (quant/kv_channel_groups.h), the codes of one key of a
// 16-token group: Row() the row's start, Load() elements [e, e + L) as f32 lanes, kOffset what
// Load subtracts from each code (the kernel adds kOffset x sum(q x step) back once per group).
// 4-bit rows are int4's blocks without their scales: int4's reader, code - 8.
struct ChannelRowQ4 {
  static constexpr float kOffset = 8.0f;
  static HWY_INLINE const uint8_t* Row(const uint8_t* group, uint32_t t, uint32_t D) {
    return channel_group_codes(group, 4, t, D) - 2;  // where ReadQ4 expects a block's scale
  }
  static HWY_INLINE VF Load(DF df, const uint8_t* row, size_t e) {
    return ReadQ4::Load(df, row + e / 32 * 16, e % 32);
  }
};
// 3- and 2-bit rows, codes packed LSB first: lane k's code starts at bit t_k = r + kBits k of the
// bytes from `p` (r < 8). One 32-bit word holds them when r + kBits L <= 32 (2 bits always, 3
// bits up to 8 lanes); 16 lanes of 3 bits span 48 bits, and the lanes past bit 29 read a second
// word 16 bits on. Never reads past the bytes holding the L codes.
template <uint32_t kBits>
struct ChannelRowLowBit {
  static constexpr float kOffset = 0.0f;
  static HWY_INLINE const uint8_t* Row(const uint8_t* group, uint32_t t, uint32_t D) {
    return channel_group_codes(group, kBits, t, D);
  }
  static HWY_INLINE VF Load(DF df, const uint8_t* row, size_t e) {
    const hn::Rebind<uint32_t, DF> du32;
    const hn::Rebind<int32_t, DF> di32;
    const size_t L = hn::Lanes(df);
    const size_t first = kBits * e;
    const uint8_t* p = row + first / 8;
    const uint32_t r = static_cast<uint32_t>(first % 8);
    const size_t bytes = (r + kBits * L + 7) / 8;
    const auto k = hn::Iota(du32, 0);
    const auto t =
        hn::Add(hn::Set(du32, r), kBits == 3 ? hn::Add(hn::Add(k, k), k) : hn::Add(k, k));
    uint32_t w1 = 0;
    std::memcpy(&w1, p, bytes < 4 ? bytes : 4);
    auto c = hn::Shr(hn::Set(du32, w1), hn::Min(t, hn::Set(du32, 31)));
    if (bytes > 4) {
      uint32_t w2 = 0;
      std::memcpy(&w2, p + 2, bytes - 2 < 4 ? bytes - 2 : 4);
      const auto past = hn::Gt(t, hn::Set(du32, 32 - kBits));
      const auto t2 = hn::IfThenElseZero(past, hn::Sub(t, hn::Set(du32, 16)));
      c = hn::IfThenElse(past, hn::Shr(hn::Set(du32, w2), t2), c);
    }
    c = hn::And(c, hn::Set(du32, (1u << kBits) - 1));
    return hn::ConvertTo(df, hn::BitCast(di32, c));
  }
};

// The factor of a reader that is the same for every key (grouped formats: 1).
template <class R>
constexpr float ConstantFactor() {
  if constexpr (R::kGrouped) {
    return 1.0f;
  } else {
    return R::kFactor;
  }
}
template <class R>
constexpr bool HasVectorScale() {
  if constexpr (R::kGrouped) {
    return false;
  } else {
    return R::kVectorScale;
  }
}
// The whole scale of key vector k (grouped formats: 1, their scales are inside KeyDot).
template <class R>
static HWY_INLINE float KeyScale(const uint8_t* k, uint32_t D) {
  if constexpr (R::kGrouped) {
    return 1.0f;
  } else {
    return R::Scale(k, D);
  }
}

// Whether these readers tile vectors of `dtype` at head dim D (else the scalar fallback reads
// them): whole vectors of lanes, and for grouped formats groups of 32 that the lanes divide.
static inline bool readers_fit(KvDtype dtype, uint32_t D) {
  const DF df;
  const size_t L = hn::Lanes(df);
  if (D % L != 0) return false;
  const uint32_t group = kv_dtype_info(dtype).group_elems;
  return group == 0 || (L <= 16 && 32 % L == 0);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // KVS_KERNELS_KV_READERS_INL_H_
