// The kernels of kernels/int8_gemm.h, written once and compiled once per ISA: each
// int8_gemm_<isa>.cpp defines KVS_INT8_NS (a namespace of its own, so that no symbol is shared
// between code built for different CPUs) and KVS_INT8_VNNI (0: AVX2 vpmaddubsw + vpmaddwd,
// 1: AVX-VNNI vpdpbusd, 2: AVX512-VNNI vpdpbusd on 512-bit vectors of 16 rows),
// then includes this file. The ISAs differ only in how they form the exact integer sums
// (dot_u8s8, GroupVec, kSumOffset) and in how many rows one vector holds; tiling, unpacking and
// every f32 operation of a (row, token) are the same code.
//
// Raw intrinsics, no Highway, and no standard-library templates: an inline function of a shared
// header compiled here with AVX2 flags could be the copy the linker keeps for baseline code.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/int8_gemm.h"
#include "kernels/packed_layout.h"

#ifndef KVS_INT8_NS
#error "define KVS_INT8_NS and KVS_INT8_VNNI before including int8_gemm-inl.h"
#endif

namespace kvs::int8_gemm::KVS_INT8_NS {
namespace {

#define KVS_AI inline __attribute__((always_inline))
// Loops over a tile's rows and tokens (and other short fixed counts) must be unrolled so that
// the accumulators live in registers; -O2 alone leaves them in memory (measured: 2x slower).
#define KVS_UNROLL _Pragma("GCC unroll 16")

constexpr bool kVnni = KVS_INT8_VNNI != 0;
constexpr bool kVnni512 = KVS_INT8_VNNI == 2;

constexpr int64_t kPrefetchBytes = 8192;  // how far ahead the weights are prefetched

KVS_AI int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// ---------------------------------------------------------------- the ISA's dot product
// Lane j (of 8) = sum of the four u8 x s8 products of bytes 4j..4j+3. Exact for every input
// used here: the s16 pair sums of vpmaddubsw stay below 2^15 (|u| <= 63 or the sign trick).
KVS_AI __m256i dot_u8s8(__m256i u, __m256i s) {
#if KVS_INT8_VNNI == 2
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif KVS_INT8_VNNI == 1
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

#if KVS_INT8_VNNI != 0
// acc + dot_u8s8(u, s) in one instruction.
KVS_AI __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) {
#if KVS_INT8_VNNI == 2
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}
#endif

// ---------------------------------------------------------------- per-type constants
template <WeightType kT>
constexpr int kOffset = kT == WeightType::kQ4_0   ? 8
                        : kT == WeightType::kQ5_0 ? 16
                        : kT == WeightType::kQ6_K ? 32
                        : kT == WeightType::kQ8_0 ? 128
                                                  : 0;
// The offset as the int32 start of the block sum: -off x (sum of the block's activation bytes).
// Q8_0 on AVX2 has none (the sign trick dots the signed bytes); Q6_K's goes with each of its two
// 16-element sub-scales (Acts::half_osum).
template <WeightType kT>
constexpr int kSumOffset = kT == WeightType::kQ6_K             ? 0
                           : kT == WeightType::kQ8_0 && !kVnni ? 0
                                                               : kOffset<kT>;
template <WeightType kT>
constexpr bool kHasMin = kT == WeightType::kQ4_1 || kT == WeightType::kQ4_K;
template <WeightType kT>
constexpr bool kSuper = kT == WeightType::kQ4_K || kT == WeightType::kQ6_K;
// ---------------------------------------------------------------- activation quantization
KVS_AI int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// One 32-element block: q = round(x / d), d = amax / 127 (as matmul.cpp's quantize_act_row,
// whose d, q and d * sum(q) this reproduces bit for bit), in block order (Q6_K: natural order);
// plus the offset terms.
template <WeightType kT>
KVS_AI void quantize_block(const float* x, int8_t* q, float* d, float* s, int32_t* osum,
                           int32_t* half_osum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  KVS_UNROLL
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float dd = _mm_cvtss_f32(m) / 127.0f;
  const __m256 id = _mm256_set1_ps(dd > 0.0f ? 1.0f / dd : 0.0f);
  __m256i qi[4];
  KVS_UNROLL
  for (int k = 0; k < 4; ++k) qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
  const int32_t qsum =
      hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3])));
  // packs leave dwords (elements) 0-3, 8-11, 16-19, 24-27 | 4-7, 12-15, 20-23, 28-31.
  const __m256i p16 =
      _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
  __m256i ordered;
  if constexpr (kT == WeightType::kQ6_K) {
    ordered = _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  } else {
    const __m256i lanes =
        _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7));
    const __m256i idx = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1,
                                         8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    ordered = _mm256_shuffle_epi8(lanes, idx);
  }
  // -128 only from non-finite input; clamped so that the sign trick stays exact.
  const __m256i xq = _mm256_max_epi8(ordered, _mm256_set1_epi8(-127));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), xq);
  *d = dd;
  *s = dd * static_cast<float>(qsum);
  if constexpr (kSumOffset<kT> != 0) {
    // From the stored bytes (a non-finite input's -128 is stored as -127).
    const __m256i sum4 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xq), _mm256_set1_epi16(1));
    *osum = -kSumOffset<kT> * hsum_epi32(sum4);
  } else {
    *osum = 0;
  }
  if constexpr (kT == WeightType::kQ6_K) {
    // Each half's sum (natural order: the low 128 bits hold elements 0..15), from the stored
    // bytes.
    const __m256i sum4 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xq), _mm256_set1_epi16(1));
    __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    h = _mm_hadd_epi32(h, h);  // [lo, hi, lo, hi]
    half_osum[0] = -kOffset<kT> * _mm_cvtsi128_si32(h);
    half_osum[1] = -kOffset<kT> * _mm_extract_epi32(h, 1);
  } else {
    (void)half_osum;
  }
}

template <WeightType kT>
void quantize_typed(const float* x, int64_t t0, int64_t t1, const Acts& a) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < a.KB; ++b) {
      const int64_t i = b * a.T + t;
      quantize_block<kT>(x + t * a.K + b * 32, a.q + i * 32, a.d + i, a.s + i, a.osum + i,
                         a.half_osum + 2 * i);
    }
}

// ---------------------------------------------------------------- the packed groups
// The weights come packed (kernels/packed_weights.h): a group of 16 rows, one 64-byte vector
// holding the same 4 block-order bytes of every row (lane r = row r). A token's 4 activation
// bytes 4k..4k+3 are broadcast and dotted with the rows' dword k, so 8 dot products give the rows'
// exact block sums with no horizontal sum, and the f32 epilogue (convert, scale, FMA) is one
// vector operation per kGroupRows rows. AVX-512 takes the 16 rows in one vector; the others take
// them as two halves of 8 (bytes 0-31 and 32-63 of each vector). A lane's operations are the same
// either way, so are the bits.
namespace pl = packed_layout;
constexpr int64_t kGroupRows = kVnni512 ? 16 : 8;
// Tokens per tile: AVX-512 has 32 registers, which hold 12 tokens' sums and accumulators (Q6_K's
// second half-sums leave room for 8); AVX2 has 16.
template <WeightType kT>
constexpr int kGroupTokens = !kVnni512                 ? static_cast<int>(kTileTokens)
                             : kT == WeightType::kQ6_K ? 8
                                                       : 12;
static_assert(pl::kRows == kPackedRows && pl::kRows % kGroupRows == 0);
typedef int32_t AliasedI32 __attribute__((may_alias));

// The vectors of one group: 8 rows in 256 bits, or 16 in 512 (AVX-512). Loads take a half's
// pointer: the 4-byte-per-row vectors, the f16 and int8-pair scales (2 bytes per row), the u8
// ones (1 byte per row).
#if KVS_INT8_VNNI == 2
struct GroupVec {
  using I = __m512i;
  using F = __m512;
  static KVS_AI I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static KVS_AI F load_f16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static KVS_AI F load_u8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static KVS_AI I load_s8(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static KVS_AI I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static KVS_AI I set1_8(int8_t v) { return _mm512_set1_epi8(v); }
  static KVS_AI F set1f(float v) { return _mm512_set1_ps(v); }
  static KVS_AI F zero() { return _mm512_setzero_ps(); }
  static KVS_AI I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static KVS_AI I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static KVS_AI I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static KVS_AI I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  template <int S>
  static KVS_AI I shl16(I a) {
    return S == 0 ? a : _mm512_slli_epi16(a, S);
  }
  template <int S>
  static KVS_AI I shr16(I a) {
    return S == 0 ? a : _mm512_srli_epi16(a, S);
  }
  static KVS_AI I maddubs(I u, I s) { return _mm512_maddubs_epi16(u, s); }
  static KVS_AI I madd(I a, I b) { return _mm512_madd_epi16(a, b); }
  static KVS_AI I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static KVS_AI F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static KVS_AI F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static KVS_AI F neg(F a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
  }
  static KVS_AI F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static KVS_AI void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
};
#else
struct GroupVec {
  using I = __m256i;
  using F = __m256;
  static KVS_AI I load(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const I*>(p));
  }
  static KVS_AI F load_f16(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static KVS_AI F load_u8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static KVS_AI I load_s8(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static KVS_AI I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static KVS_AI I set1_8(int8_t v) { return _mm256_set1_epi8(v); }
  static KVS_AI F set1f(float v) { return _mm256_set1_ps(v); }
  static KVS_AI F zero() { return _mm256_setzero_ps(); }
  static KVS_AI I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static KVS_AI I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static KVS_AI I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static KVS_AI I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  template <int S>
  static KVS_AI I shl16(I a) {
    return S == 0 ? a : _mm256_slli_epi16(a, S);
  }
  template <int S>
  static KVS_AI I shr16(I a) {
    return S == 0 ? a : _mm256_srli_epi16(a, S);
  }
  static KVS_AI I maddubs(I u, I s) { return _mm256_maddubs_epi16(u, s); }
  static KVS_AI I madd(I a, I b) { return _mm256_madd_epi16(a, b); }
#if KVS_INT8_VNNI == 1
  static KVS_AI I dpbusd(I acc, I u, I s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#endif
  static KVS_AI F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static KVS_AI F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static KVS_AI F neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static KVS_AI F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static KVS_AI void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
};
#endif

// isum += each lane's row dotted with the token's bytes 4k..4k+3 (bx, broadcast), exactly.
template <WeightType kT>
KVS_AI GroupVec::I group_dot(GroupVec::I isum, GroupVec::I u, GroupVec::I bx) {
  using V = GroupVec;
#if KVS_INT8_VNNI != 0
  return V::dpbusd(isum, u, bx);
#else
  if constexpr (kT == WeightType::kQ8_0)  // signed weights: |w| x sign(x, w)
    return V::add(isum, V::madd(V::maddubs(_mm256_abs_epi8(u), _mm256_sign_epi8(bx, u)),
                                _mm256_set1_epi16(1)));
  return V::add(isum, V::madd(V::maddubs(u, bx), _mm256_set1_epi16(1)));
#endif
}

// group_dot with the token's 4 bytes at x. On AVX-512 they are the dot product's embedded
// broadcast ({1to16}): GCC 12 does not fold a broadcast into vpdpbusd, and a separate
// vpbroadcastd per dot product doubles the instructions the front end must issue. The same
// instruction either way, so the same bits.
template <WeightType kT>
KVS_AI GroupVec::I group_dot_x4(GroupVec::I isum, GroupVec::I u, const int8_t* x) {
#if KVS_INT8_VNNI == 2
  __asm__("vpdpbusd %[x]%{1to16%}, %[u], %[s]"
          : [s] "+v"(isum)
          : [u] "v"(u), [x] "m"(*reinterpret_cast<const AliasedI32*>(x)));
  return isum;
#else
  // A plain (may_alias) load, broadcast.
  return group_dot<kT>(isum, u, GroupVec::set1(*reinterpret_cast<const AliasedI32*>(x)));
#endif
}

// The 5th bit (Q5_0) of dword J's bytes, as 0x10: bit J of each byte of hb moved to bit 4 (16-bit
// shifts: the bit picked never crosses a byte).
template <int J>
KVS_AI GroupVec::I q5_high(GroupVec::I hb) {
  using V = GroupVec;
  const V::I bit4 = V::set1_8(0x10);
  if constexpr (J <= 4)
    return V::and_(V::shl16<4 - J>(hb), bit4);
  else
    return V::and_(V::shr16<J - 4>(hb), bit4);
}

// The top 2 bits (Q6_K) of the dword whose pair is at bits 2Q, 2Q+1 of hb, as bits 4 and 5.
template <int Q>
KVS_AI GroupVec::I q6_high(GroupVec::I hb) {
  using V = GroupVec;
  const V::I bits45 = V::set1_8(0x30);
  if constexpr (Q <= 2)
    return V::and_(V::shl16<4 - 2 * Q>(hb), bits45);
  else
    return V::and_(V::shr16<2>(hb), bits45);
}

// y[(t0 + t) * N + n0 + r] for t < RT, r < rn <= kGroupRows, from one half (or, on AVX-512,
// all) of a packed group. Per (row, token) and block b in order: isum_b exact in int32, then
// acc = fma(f32(isum_b), dw_b * dx_b, acc) and, for Q4_1 / Q4_K, acc = fma(m_b, s_b, acc):
// matmul.h's arithmetic on every path.
template <WeightType kT, int RT, bool kPrefetch = (RT > 1)>
__attribute__((noinline)) void packed_tile(const uint8_t* group, int h, const Acts& a, int64_t t0,
                                           float* y, int64_t N, int64_t n0, int rn) {
  using V = GroupVec;
  constexpr int64_t kBytes = pl::block_bytes(kT);
  constexpr int64_t kIterBytes = kSuper<kT> ? kBytes / 8 : kBytes;  // bytes per 32-element block
  const int64_t KB = a.KB, T = a.T;
  // The half's byte offsets: in a vector (4 bytes a row), a 2-byte-per-row and a 1-byte-per-row
  // array.
  const int64_t hv = 32 * h, h2 = 16 * h, h1 = 8 * h;
  V::F acc[RT];
  KVS_UNROLL
  for (int t = 0; t < RT; ++t) acc[t] = V::zero();
  for (int64_t b = 0; b < KB; ++b) {
    // Prefetch the weights kPrefetchBytes ahead, at the rate they are consumed (the next groups
    // follow this one in memory). Without it, a matrix read from DRAM (an LM head) streams at
    // half the read bandwidth at 4 tokens: the hardware prefetchers do not run far enough ahead
    // of a loop that spends that long on each block. At 1 token it depends on the CPU
    // (int8_prefetch_one_token): on Zen 4 the prefetches cost a quarter of the LM head's speed
    // (22 against 16 GB/s), on Zen 5 they make decode 12-29% faster.
    if constexpr (kPrefetch) {
      const uint8_t* pf = group + b * kIterBytes + kPrefetchBytes;
      KVS_UNROLL
      for (int64_t o = 0; o < kIterBytes; o += 64) __builtin_prefetch(pf + o);
    }
    const uint8_t* unit;  // the block's first vector
    V::F dw, mw = V::zero();
    V::F sc_lo{}, sc_hi{};  // Q6_K: the sub-scales of elements 0..15 and 16..31
    if constexpr (kT == WeightType::kQ4_K) {
      const uint8_t* sb = group + (b / 8) * kBytes;
      const int64_t j = b % 8;
      unit = sb + pl::kLowBits * j;
      dw = V::mul(V::load_f16(sb + pl::kQ4KD + h2), V::load_u8(sb + pl::kQ4KSc + 16 * j + h1));
      mw = V::mul(V::neg(V::load_f16(sb + pl::kQ4KDmin + h2)),
                  V::load_u8(sb + pl::kQ4KMn + 16 * j + h1));
    } else if constexpr (kT == WeightType::kQ6_K) {
      const uint8_t* sb = group + (b / 8) * kBytes;
      const int64_t j = b % 8;
      unit = sb + pl::kQ6KUnit * j;
      dw = V::load_f16(sb + pl::kQ6KD + h2);
      sc_lo = V::cvt(V::load_s8(sb + pl::kQ6KSc + 32 * j + h1));
      sc_hi = V::cvt(V::load_s8(sb + pl::kQ6KSc + 32 * j + 16 + h1));
    } else {
      unit = group + b * kBytes;
      const int64_t d_off = kBytes - (kHasMin<kT> ? 2 : 1) * pl::kF16;
      dw = V::load_f16(unit + d_off + h2);
      if constexpr (kHasMin<kT>) mw = V::load_f16(unit + d_off + pl::kF16 + h2);
    }
    // This block of the tile's tokens: one pointer each, the tokens at constant offsets.
    const int64_t i0 = b * T + t0;
    const int8_t* xq = a.q + i0 * 32;
    // Q6_K sums its two 16-element halves apart (dwords 0-3 and 4-7: natural order), each from
    // its offset term, and scales each by its sub-scale once per block.
    constexpr bool kHalves = kT == WeightType::kQ6_K;
    V::I isum[RT], isum_hi[kHalves ? RT : 1];
    KVS_UNROLL
    for (int t = 0; t < RT; ++t) {
      if constexpr (kHalves) {
        isum[t] = V::set1(a.half_osum[2 * (i0 + t)]);
        isum_hi[t] = V::set1(a.half_osum[2 * (i0 + t) + 1]);
      } else if constexpr (kSumOffset<kT> == 0) {
        isum[t] = V::set1(0);  // quantize_block stores no offset term: 0, without the loads
      } else {
        isum[t] = V::set1(a.osum[i0 + t]);
      }
    }
    // Dots dword k of the rows (u) with each token's bytes 4k..4k+3.
    const auto dots = [&](int k, V::I u) __attribute__((always_inline)) {
      KVS_UNROLL
      for (int t = 0; t < RT; ++t) {
        const int8_t* x = xq + 32 * t + 4 * k;
        if (kHalves && k >= 4)
          isum_hi[t] = group_dot_x4<kT>(isum_hi[t], u, x);
        else
          isum[t] = group_dot_x4<kT>(isum[t], u, x);
      }
    };
    if constexpr (kT == WeightType::kQ8_0) {
      KVS_UNROLL
      for (int k = 0; k < 8; ++k) {
        const V::I w = V::load(unit + pl::kVector * k + hv);
        dots(k, kVnni ? V::xor_(w, V::set1_8(-128)) : w);  // VNNI: w + 128, unsigned
      }
    } else {
      const V::I m4 = V::set1_8(0x0F);
      V::I hb0{}, hb1{};
      if constexpr (kT == WeightType::kQ5_0) hb0 = V::load(unit + pl::kLowBits + hv);
      if constexpr (kT == WeightType::kQ6_K) {
        hb0 = V::load(unit + pl::kLowBits + hv);
        hb1 = V::load(unit + pl::kLowBits + pl::kVector + hv);
      }
      const auto step = [&]<int K>() __attribute__((always_inline)) {
        const V::I n = V::load(unit + pl::kVector * K + hv);
        V::I lo = V::and_(n, m4), hi = V::and_(V::shr16<4>(n), m4);
        if constexpr (kT == WeightType::kQ5_0) {
          lo = V::or_(lo, q5_high<K>(hb0));
          hi = V::or_(hi, q5_high<K + 4>(hb0));
        } else if constexpr (kT == WeightType::kQ6_K) {
          lo = V::or_(lo, q6_high<K>(hb0));
          hi = V::or_(hi, q6_high<K>(hb1));
        }
        dots(K, lo);
        dots(K + 4, hi);
      };
      step.template operator()<0>();
      step.template operator()<1>();
      step.template operator()<2>();
      step.template operator()<3>();
    }
    KVS_UNROLL
    for (int t = 0; t < RT; ++t) {
      // Q6_K: the block's integer sum lo x sc_lo + hi x sc_hi, formed in f32 and exact there: a
      // half's |sum of (q - 32) x x| <= 16 x 32 x 127 < 2^16 and |sub-scale| <= 128, so each
      // product is below 2^23 and their sum below 2^24, all integers f32 holds exactly. The
      // same value as the int32 sum converted, without vpmulld (two uops on one port on Intel).
      V::F sum;
      if constexpr (kHalves)
        sum = V::fmadd(V::cvt(isum_hi[t]), sc_hi, V::mul(V::cvt(isum[t]), sc_lo));
      else
        sum = V::cvt(isum[t]);
      acc[t] = V::fmadd(sum, V::mul(dw, V::set1f(a.d[i0 + t])), acc[t]);
      if constexpr (kHasMin<kT>) acc[t] = V::fmadd(mw, V::set1f(a.s[i0 + t]), acc[t]);
    }
  }
  KVS_UNROLL
  for (int t = 0; t < RT; ++t) {
    float* out = y + (t0 + t) * N + n0;
    if (rn == kGroupRows) {
      V::storeu(out, acc[t]);
    } else {
      alignas(64) float tmp[kGroupRows];
      V::storeu(tmp, acc[t]);
      for (int r = 0; r < rn; ++r) out[r] = tmp[r];
    }
  }
}

// ---------------------------------------------------------------- driver
constexpr int narrower(int a, int b) { return a < b ? a : b; }

template <WeightType kT>
void gemm_typed(const uint8_t* group, const Acts& a, int64_t t0, int64_t t1, float* y, int64_t N,
                int64_t n0, int rows, bool prefetch_one) {
  // Tiles of equal width (16 tokens: 8 + 8, not 12 + 4). Each (row, token) sum runs the same
  // operations in the same order whatever the tile's width: the bits do not change.
  constexpr int kMax = kGroupTokens<kT>;
  const int64_t tiles = (t1 - t0 + kMax - 1) / kMax;
  for (int64_t i = 0, tt = t0; i < tiles; ++i) {
    const int rt = static_cast<int>((t1 - tt) / (tiles - i) + ((t1 - tt) % (tiles - i) != 0));
    for (int h = 0; h * kGroupRows < rows; ++h) {
      const int64_t n = n0 + h * kGroupRows;
      const int rn = static_cast<int>(imin(kGroupRows, rows - h * kGroupRows));
      switch (rt) {
        case 1:
          if (prefetch_one)
            packed_tile<kT, 1, true>(group, h, a, tt, y, N, n, rn);
          else
            packed_tile<kT, 1, false>(group, h, a, tt, y, N, n, rn);
          break;
        case 2: packed_tile<kT, 2>(group, h, a, tt, y, N, n, rn); break;
        case 3: packed_tile<kT, 3>(group, h, a, tt, y, N, n, rn); break;
#if KVS_INT8_VNNI == 2
        case 4: packed_tile<kT, 4>(group, h, a, tt, y, N, n, rn); break;
        case 5: packed_tile<kT, 5>(group, h, a, tt, y, N, n, rn); break;
        case 6: packed_tile<kT, 6>(group, h, a, tt, y, N, n, rn); break;
        case 7: packed_tile<kT, 7>(group, h, a, tt, y, N, n, rn); break;
        case 8: packed_tile<kT, 8>(group, h, a, tt, y, N, n, rn); break;
        case 9: packed_tile<kT, narrower(kMax, 9)>(group, h, a, tt, y, N, n, rn); break;
        case 10: packed_tile<kT, narrower(kMax, 10)>(group, h, a, tt, y, N, n, rn); break;
        case 11: packed_tile<kT, narrower(kMax, 11)>(group, h, a, tt, y, N, n, rn); break;
#endif
        default: packed_tile<kT, kMax>(group, h, a, tt, y, N, n, rn);
      }
    }
    tt += rt;
  }
}

void gemm(WeightType type, const uint8_t* group, const Acts& a, int64_t t0, int64_t t1, float* y,
          int64_t N, int64_t n0, int rows, bool prefetch_one) {
  switch (type) {
    case WeightType::kQ4_0:
      return gemm_typed<WeightType::kQ4_0>(group, a, t0, t1, y, N, n0, rows, prefetch_one);
    case WeightType::kQ4_1:
      return gemm_typed<WeightType::kQ4_1>(group, a, t0, t1, y, N, n0, rows, prefetch_one);
    case WeightType::kQ5_0:
      return gemm_typed<WeightType::kQ5_0>(group, a, t0, t1, y, N, n0, rows, prefetch_one);
    case WeightType::kQ8_0:
      return gemm_typed<WeightType::kQ8_0>(group, a, t0, t1, y, N, n0, rows, prefetch_one);
    case WeightType::kQ4_K:
      return gemm_typed<WeightType::kQ4_K>(group, a, t0, t1, y, N, n0, rows, prefetch_one);
    case WeightType::kQ6_K:
      return gemm_typed<WeightType::kQ6_K>(group, a, t0, t1, y, N, n0, rows, prefetch_one);
    default: return;  // the driver sends only the types above
  }
}

void quantize(WeightType type, const float* x, int64_t t0, int64_t t1, const Acts& a) {
  switch (type) {
    case WeightType::kQ4_0: return quantize_typed<WeightType::kQ4_0>(x, t0, t1, a);
    case WeightType::kQ5_0: return quantize_typed<WeightType::kQ5_0>(x, t0, t1, a);
    case WeightType::kQ8_0: return quantize_typed<WeightType::kQ8_0>(x, t0, t1, a);
    case WeightType::kQ6_K: return quantize_typed<WeightType::kQ6_K>(x, t0, t1, a);
    default: return quantize_typed<WeightType::kQ4_1>(x, t0, t1, a);  // no offset term
  }
}

// 12 independent accumulators, so that the loop is bound by the dot product's throughput, not
// its latency. The empty asm makes the inputs opaque each round (nothing can be hoisted). On
// AVX-512 the vectors are 512-bit, as the GEMM's (some CPUs run them at twice the 256-bit rate).
#if KVS_INT8_VNNI == 2
constexpr int64_t kPeakLanes = 16;
int64_t peak_loop(int64_t iters) {
  // Distinct starting values: from equal ones the compiler proves the 12 chains equal and runs
  // one (a latency-bound loop that reported 12 times the dot products it ran).
  __m512i acc[12];
  KVS_UNROLL
  for (int k = 0; k < 12; ++k) acc[k] = _mm512_set1_epi32(k);
  __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+v"(u), "+v"(s));
    KVS_UNROLL
    for (auto& v : acc) v = _mm512_dpbusd_epi32(v, u, s);
  }
  __m512i t = acc[0];
  for (int k = 1; k < 12; ++k) t = _mm512_add_epi32(t, acc[k]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, t);
  int64_t sum = 0;
  for (int32_t l : lanes) sum += l;
  return sum - 16 * 66;  // less the starting values (0 + 1 + ... + 11 per lane)
}
#else
constexpr int64_t kPeakLanes = 8;
int64_t peak_loop(int64_t iters) {
  __m256i acc[12];  // distinct starting values, as above
  KVS_UNROLL
  for (int k = 0; k < 12; ++k) acc[k] = _mm256_set1_epi32(k);
  __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+x"(u), "+x"(s));
    KVS_UNROLL
    for (auto& v : acc) {
#if KVS_INT8_VNNI != 0
      v = dot_u8s8_acc(v, u, s);
#else
      // The product is the same for every accumulator: hide u again, or it is computed once.
      __asm__ volatile("" : "+x"(u));
      v = _mm256_add_epi32(v, dot_u8s8(u, s));
#endif
    }
  }
  __m256i t = acc[0];
  for (int k = 1; k < 12; ++k) t = _mm256_add_epi32(t, acc[k]);
  return hsum_epi32(t) - 8 * 66;  // less the starting values
}
#endif

#undef KVS_AI
#undef KVS_UNROLL

}  // namespace

const Kernels& kernels() {
  static const Kernels k{&quantize, &gemm, &peak_loop, 12 * 4 * kPeakLanes};
  return k;
}

}  // namespace kvs::int8_gemm::KVS_INT8_NS
