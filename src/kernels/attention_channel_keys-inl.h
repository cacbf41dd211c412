// The score pass of paged attention over per-channel keys (quant/kv_channel_groups.h), one copy per
// SIMD target. Included by paged_attention.cpp after kernels/attention_key_scores-inl.h (RangeArgs)
// and the readers, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_CHANNEL_KEYS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_CHANNEL_KEYS_INL_H_
#undef KVS_KERNELS_ATTENTION_CHANNEL_KEYS_INL_H_
#else
#define KVS_KERNELS_ATTENTION_CHANNEL_KEYS_INL_H_
#endif

#include <hwy/highway.h>

#include "kernels/int8_key_dots.h"
#include "kernels/paged_attention_args.h"
#include "quant/key_tails.h"
#include "quant/kv_channel_groups.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Per-channel keys (quant/kv_channel_groups.h), a group of G tokens at a time: with k = min + step
// x code, q . k = sum q min + sum (q step) code, so each group folds its parameters into the
// queries once (qs = q x step, and the constant sum q x min) and each key is one dot product of
// qs with its codes, unpacked to floats.
//
// 4-bit and int2mix_chan64 codes are scored against an int8 qs instead (the group's qs of a head
// quantized with one scale d = max |qs| / 127, as int8 keys' queries are): for 4-bit codes
// q . k = sum q min + 8 sum qs + d sum qi (code - 8), for int2mix's sum q min + d sum qi code
// (code = the 2-bit code + 4 x the wide channels' third bit). The integer sum is exact in floats
// and in VNNI's int32 lanes (kernels/int8_key_dots.h), so every path gives the same scores. The
// query's rounding adds sum (qs - d qi) code': at most d/2 x |code'| per channel, against the
// codes' own error of up to qs/2 (docs/kv-quantization.md measures what it does to perplexity).
// What the cursor has not yet requested of this block, for a VNNI kernel to request.
static HWY_INLINE int8_key_dots::Prefetch TakeRest(PrefetchCursor& pf) {
  const int8_key_dots::Prefetch rest{
      .p = {pf.p0 != nullptr ? pf.p0 + std::min(pf.done0, pf.bytes0) : nullptr,
            pf.p1 != nullptr ? pf.p1 + std::min(pf.done1, pf.bytes1) : nullptr},
      .bytes = {pf.bytes0 - std::min(pf.done0, pf.bytes0),
                pf.bytes1 - std::min(pf.done1, pf.bytes1)}};
  pf.done0 = pf.bytes0;
  pf.done1 = pf.bytes1;
  return rest;
}

// A VNNI kernel's integer sums [g * len, + n) -> scores: (sum + add) x factor, as the readers'.
template <int NG>
static HWY_INLINE void FinishIntegerScores(float* out, int32_t len, int32_t n, const float* add,
                                           const float* factor) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (int g = 0; g < NG; ++g) {
    float* o = out + g * len;
    const VF va = hn::Set(df, add[g]), vf = hn::Set(df, factor[g]);
    int32_t i = 0;
    for (; i + int32_t(L) <= n; i += L)
      hn::StoreU(hn::Mul(hn::Add(hn::LoadU(df, o + i), va), vf), df, o + i);
    for (; i < n; ++i) o[i] = (o[i] + add[g]) * factor[g];
  }
}

template <int NG>
static void ScoreKeysChannel(const RangeArgs& r, float* codes) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const int32_t bs = static_cast<int32_t>(kv.block_size);
  const int32_t G = static_cast<int32_t>(kv_channel_group_tokens(kv.k_dtype));
  const ChannelBits code = channel_bits(kv.k_dtype);
  const uint32_t bits = code.bits;
  const uint64_t group_bytes = channel_group_bytes(code, uint32_t(G), D);
  const int32_t len = r.j1 - r.j0;
  const uint32_t* table = a.block_table[r.t];
  const DF df;
  const size_t L = hn::Lanes(df);
  // 4-bit and int2mix codes are scored against int8 qs on every path (above); int4's reader reads
  // 4-bit rows where it fits the target's lanes, VNNI where the CPU has it and the rows fill its
  // vectors.
  const bool q4 = bits == 4;
  const bool int_qs = int8_key_dots::channel_keys_in_int8(code);
  const bool q4_rows = q4 && readers_fit(KvDtype::kInt4, D);
  const int8_key_dots::Kernels* vnni =
      q4_rows && r.int8_dots != nullptr && D % r.int8_dots->chunk == 0 ? r.int8_dots : nullptr;
  const int8_key_dots::MixRowDotsFn vnni_mix =
      code.wide && r.int8_dots != nullptr && D % 64 == 0 && D <= 256 ? r.int8_dots->mix_rows
                                                                     : nullptr;
  // Groups scored by a VNNI kernel read the int8 qs only: the float copy is not written.
  const bool int_only = (q4_rows && vnni != nullptr) || (code.wide && vnni_mix != nullptr);
  thread_local std::vector<float> qs, wide_terms;
  thread_local std::vector<int8_t> q8;
  if (qs.size() < size_t{NG} * D) qs.resize(size_t{NG} * D);
  if (int_qs && q8.size() < size_t{NG} * D) q8.resize(size_t{NG} * D);
  // The query's own group is read in f16 (quant/key_tails.h), the groups before it sealed.
  const int32_t own_start = (a.context_len[r.t] - 1) / G * G;
  const KeyTails* tails = kv.key_tails;
  PrefetchCursor pf;  // the block two ahead and this block's V, spread over its keys
  uint32_t lines_per_step = 0;
  for (int32_t j = r.j0; j < r.j1;) {
    const int32_t c = j / G;  // the group, counted from the sequence's start
    const int32_t end = std::min<int32_t>(r.j1, (c + 1) * G);
    if (j == r.j0 || j % bs == 0) {
      pf = BlockPrefetch(r, j, j / bs);
      lines_per_step = pf.LinesPer((std::min<int32_t>(r.j1, (j / bs + 1) * bs) - j + 3) / 4);
    }
    const uint8_t* group =
        kv.k_head(table[j / bs], a.layer, r.kvh) + uint64_t((c * G % bs) / G) * group_bytes;
    // The group's rows follow each other in the last write's f16 copy.
    if (const uint16_t* own = j >= own_start && tails != nullptr
                                  ? tails->step_key(table[j / bs], uint32_t(j % bs), bs, r.kvh)
                                  : nullptr) {
      if (D % L == 0) {  // a dot product per head in lanes, as ScoreKeysD reads f16 keys
        const uint8_t* row = reinterpret_cast<const uint8_t*>(own);
        for (; j < end; ++j, row += 2 * D) {
          VF acc[NG];
          KeyDot<ReadF16, NG, 0>(df, row, r.q, D, acc);
          for (int g = 0; g < NG; ++g)
            r.scores[g * len + (j - r.j0)] = hn::GetLane(hn::SumOfLanes(df, acc[g])) * a.scale;
        }
        continue;
      }
      for (; j < end; ++j, own += D) {
        for (uint32_t i = 0; i < D; ++i) codes[i] = f16_to_f32(own[i]);
        for (int g = 0; g < NG; ++g) {
          float d = 0;
          for (uint32_t i = 0; i < D; ++i) d += r.q[g * D + i] * codes[i];
          r.scores[g * len + (j - r.j0)] = d * a.scale;
        }
      }
      continue;
    }
    const uint8_t* mins = channel_group_minimums(group);
    const uint8_t* steps = channel_group_steps(group, D);
    // Per head: qs = q x step, and the constant sum q x min (+ 8 x sum qs for 4-bit codes, which
    // are summed as code - 8). Scores are (dot + add) x factor.
    float q_const[NG], add[NG], factor[NG], qd[NG];
    int32_t qsum[NG];
    if (D % L == 0) {
      // Unrolled over the heads, so the accumulators stay in registers (GCC spilled them).
      VF c_min[NG], c_qs[NG], c_max[NG];
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) c_min[g] = c_qs[g] = c_max[g] = hn::Zero(df);
      for (uint32_t i = 0; i < D; i += L) {
        // |step|: int2mix_chan64 marks its wide channels in the sign bits.
        const VF mn = ReadF16::Load(df, mins, i), st = hn::Abs(ReadF16::Load(df, steps, i));
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) {
          const VF q = hn::LoadU(df, r.q + g * D + i);
          const VF qst = hn::Mul(q, st);
          hn::StoreU(qst, df, qs.data() + g * D + i);
          c_min[g] = hn::MulAdd(q, mn, c_min[g]);
          if (q4) c_qs[g] = hn::Add(c_qs[g], qst);
          c_max[g] = hn::Max(c_max[g], hn::Abs(qst));
        }
      }
      if (int_qs)  // qs -> int8 in lanes, as quantize_query_int8 rounds it (the reference's)
        for (int g = 0; g < NG; ++g) {
          const float amax = hn::GetLane(hn::MaxOfLanes(df, c_max[g]));
          float* x = qs.data() + g * D;
          int8_t* qi = q8.data() + g * D;
          if (!(amax > 0.0f) || !std::isfinite(amax)) {
            std::memset(qi, 0, D);
            std::fill(x, x + D, 0.0f);
            qsum[g] = 0;
            qd[g] = 0.0f;
            continue;
          }
          const VF inv = hn::Set(df, 127.0f / amax), lim = hn::Set(df, 127.0f);
          const hn::Rebind<int8_t, DF> d8;
          VF sum = hn::Zero(df);
          for (uint32_t i = 0; i < D; i += L) {
            const VF v =
                hn::Max(hn::Min(hn::Round(hn::Mul(hn::LoadU(df, x + i), inv)), lim), hn::Neg(lim));
            if (!int_only) hn::StoreU(v, df, x + i);
            hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(hn::RebindToSigned<DF>(), v)), d8, qi + i);
            sum = hn::Add(sum, v);
          }
          qsum[g] = static_cast<int32_t>(hn::GetLane(hn::SumOfLanes(df, sum)));
          qd[g] = amax / 127.0f;
        }
      KVS_UNROLL
      for (int g = 0; g < NG; ++g)
        q_const[g] = hn::GetLane(hn::SumOfLanes(df, c_min[g])) +
                     (q4 ? ChannelRowQ4::kOffset * hn::GetLane(hn::SumOfLanes(df, c_qs[g])) : 0.0f);
    } else {
      for (int g = 0; g < NG; ++g) {
        float c = 0, c_qs = 0;
        for (uint32_t i = 0; i < D; ++i) {
          uint16_t m16, s16;
          std::memcpy(&m16, mins + 2 * i, 2);
          std::memcpy(&s16, steps + 2 * i, 2);
          c += r.q[g * D + i] * f16_to_f32(m16);
          qs[g * D + i] = r.q[g * D + i] * f16_to_f32(s16 & 0x7FFFu);
          c_qs += qs[g * D + i];
        }
        q_const[g] = c + (q4 ? ChannelRowQ4::kOffset * c_qs : 0.0f);
        if (int_qs) {
          float* x = qs.data() + g * D;
          int8_t* qi = q8.data() + g * D;
          qd[g] = quantize_query_int8(x, D, qi, &qsum[g]);
          for (uint32_t i = 0; i < D; ++i) x[i] = qi[i];
        }
      }
    }
    for (int g = 0; g < NG; ++g) {
      add[g] = q_const[g];
      factor[g] = a.scale;
    }
    if (int_qs)  // qs is int8 now (qi, also as floats for the float paths): dot = sum qi code'
      for (int g = 0; g < NG; ++g)
        if (qd[g] > 0.0f) {
          add[g] = q_const[g] / qd[g];
          factor[g] = qd[g] * a.scale;
        }  // else every qi is 0 and the score is q_const x scale
    if (q4_rows) {
      if (vnni != nullptr) {
        const int8_key_dots::Prefetch rest = TakeRest(pf);
        const int32_t n = end - j;
        float* out = r.scores + (j - r.j0);
        vnni->q4_rows(q8.data(), qsum, NG, D, channel_group_codes(group, 4, uint32_t(j % G), D), n,
                      out, len, rest);
        FinishIntegerScores<NG>(out, len, n, add, factor);
        j = end;
        continue;
      }
      j = ScoreChannelRowsD<ChannelRowQ4, NG>(r, group, G, qs.data(), add, factor, j, end, pf,
                                              lines_per_step);
    } else if (code.wide && vnni_mix != nullptr) {
      const int32_t n = end - j;
      float* out = r.scores + (j - r.j0);
      vnni_mix(q8.data(), NG, D, steps, channel_group_codes(group, 2, uint32_t(j % G), D),
               channel_group_wide_bits(group, uint32_t(j % G), D), n, out, len, TakeRest(pf));
      FinishIntegerScores<NG>(out, len, n, add, factor);
      j = end;
      continue;
    } else if (code.wide) {
      // int2mix_chan64: the wide channels' third bits stand for 4 x (q x step) each, added in
      // lanes with the 2-bit rows' sums (targets of fewer than 8 lanes: the scalar loop below).
      const uint32_t W = D / 4;
      if (D % L == 0 && L <= 16 && L % 8 == 0 && W % L == 0) {
        // Each head's wide terms in channel order, a chunk of channels at a time compressed to
        // the lanes whose step has its sign bit set (a full vector may be written: L of slack).
        wide_terms.resize(size_t{NG} * (W + L));
        const hn::RebindToUnsigned<DF> du;
        const hn::Rebind<uint16_t, DF> du16;
        size_t k = 0;
        for (uint32_t i = 0; i < D; i += L) {
          const auto sign = hn::And(
              hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(steps) + i)),
              hn::Set(du, 0x8000u));
          const auto is_wide = hn::RebindMask(df, hn::Ne(sign, hn::Zero(du)));
          size_t n = 0;
          KVS_UNROLL
          for (int g = 0; g < NG; ++g)
            n = hn::CompressStore(hn::Mul(hn::Set(df, 4.0f), hn::LoadU(df, qs.data() + g * D + i)),
                                  is_wide, df, wide_terms.data() + size_t(g) * (W + L) + k);
          k += n;
          KVS_CHECK(k <= W);
        }
        KVS_CHECK(k == W);
        j = ScoreChannelRowsD<ChannelRowLowBit<2>, NG, true>(
            r, group, G, qs.data(), add, factor, j, end, pf, lines_per_step,
            WideChannelTerms{
                .w = wide_terms.data(), .W = W, .stride = W + uint32_t(L), .group = group});
      }
    } else if (D % L == 0 && L <= 16) {
      j = bits == 3 ? ScoreChannelRowsD<ChannelRowLowBit<3>, NG>(r, group, G, qs.data(), add,
                                                                 factor, j, end, pf, lines_per_step)
                    : ScoreChannelRowsD<ChannelRowLowBit<2>, NG>(
                          r, group, G, qs.data(), add, factor, j, end, pf, lines_per_step);
    }
    for (; j < end; ++j) {  // head dims the readers cannot tile
      channel_row_codes(code, group, uint32_t(j % G), D, codes);
      if (q4)
        for (uint32_t i = 0; i < D; ++i) codes[i] -= ChannelRowQ4::kOffset;
      for (int g = 0; g < NG; ++g) {
        float d = 0;
        for (uint32_t i = 0; i < D; ++i) d += qs[g * D + i] * codes[i];
        r.scores[g * len + (j - r.j0)] = (d + add[g]) * factor[g];
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
