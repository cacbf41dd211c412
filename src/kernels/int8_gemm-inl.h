// The kernels of kernels/int8_gemm.h, written once and compiled once per ISA: each
// int8_gemm_<isa>.cpp defines KVS_INT8_NS (a namespace of its own, so that no symbol is shared
// between code built for different CPUs) and KVS_INT8_VNNI (0: AVX2 vpmaddubsw + vpmaddwd,
// 1: AVX-VNNI vpdpbusd, 2: AVX512-VNNI vpdpbusd, the panel kernel on 512-bit vectors of 16 rows),
// then includes this file. The ISAs differ only in how they form the exact integer sums
// (dot_u8s8, GroupVec, kSumOffset) and in the panel's group width; tiling, unpacking and every
// f32 operation of a (row, token) are the same code.
//
// Raw intrinsics, no Highway, and no standard-library templates: an inline function of a shared
// header compiled here with AVX2 flags could be the copy the linker keeps for baseline code.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/int8_gemm.h"

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
constexpr int64_t kPrefetchBytes = 16384;  // small steps: software prefetch distance

KVS_AI int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

KVS_AI float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

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

// ---------------------------------------------------------------- block order
// Natural element order -> block order (bytes 4j..4j+3 = elements 2j, 2j+1, 16+2j, 17+2j).
KVS_AI __m256i to_block_order(__m256i v) {
  const __m256i idx = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1,
                                       8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
  return _mm256_shuffle_epi8(_mm256_permute4x64_epi64(v, 0xD8), idx);
}

// 16 bytes of nibbles (low = elements 0..15, high = 16..31) -> 32 values 0..15 in block order.
KVS_AI __m256i nibbles_block_order(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(v, m);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  return _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi));
}

// Q5_0's 32 high bits (bit e = element e) as 0x10 bytes in block order.
KVS_AI __m256i high_bits_block_order(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte p of the block holds element e(p); it needs bit e % 8 of qh byte e / 8.
  const __m256i byte_of = _mm256_setr_epi8(0, 0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2,  //
                                           1, 1, 3, 3, 1, 1, 3, 3, 1, 1, 3, 3, 1, 1, 3, 3);
  const __m256i bit_of =
      _mm256_setr_epi8(1, 2, 1, 2, 4, 8, 4, 8, 16, 32, 16, 32, 64, -128, 64, -128, 1, 2, 1, 2, 4, 8,
                       4, 8, 16, 32, 16, 32, 64, -128, 64, -128);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), byte_of);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit_of), bit_of);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// ---------------------------------------------------------------- per-type constants
template <WeightType kT>
constexpr int kOffset = kT == WeightType::kQ4_0   ? 8
                        : kT == WeightType::kQ5_0 ? 16
                        : kT == WeightType::kQ6_K ? 32
                        : kT == WeightType::kQ8_0 ? 128
                                                  : 0;
// The offset as the int32 start of the block sum: -off x (sum of the block's activation bytes).
// Q8_0 on AVX2 has none (the sign trick dots the signed bytes); Q6_K's offset goes with its
// 16-element sub-scales, as s16 pair terms (Acts::off).
template <WeightType kT>
constexpr int kSumOffset = kT == WeightType::kQ6_K             ? 0
                           : kT == WeightType::kQ8_0 && !kVnni ? 0
                                                               : kOffset<kT>;
template <WeightType kT>
constexpr bool kHasMin = kT == WeightType::kQ4_1 || kT == WeightType::kQ4_K;
template <WeightType kT>
constexpr bool kSuper = kT == WeightType::kQ4_K || kT == WeightType::kQ6_K;
template <WeightType kT>
constexpr int64_t kBlockBytes = kT == WeightType::kQ4_0   ? 18
                                : kT == WeightType::kQ4_1 ? 20
                                : kT == WeightType::kQ5_0 ? 22
                                : kT == WeightType::kQ8_0 ? 34
                                : kT == WeightType::kQ4_K ? 144
                                                          : 210;  // Q6_K (per 256 elements)

// ---------------------------------------------------------------- activation quantization
KVS_AI int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// One 32-element block: q = round(x / d), d = amax / 127 (as matmul.cpp's quantize_act_row,
// whose d, q and d * sum(q) this reproduces bit for bit), in block order; plus the offset term.
template <WeightType kT>
KVS_AI void quantize_block(const float* x, int8_t* q, float* d, float* s, int32_t* osum,
                           uint8_t* off) {
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
  const __m256i lanes = _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7));
  const __m256i idx = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1,
                                       8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
  // -128 only from non-finite input; clamped so that the sign trick stays exact.
  const __m256i xq = _mm256_max_epi8(_mm256_shuffle_epi8(lanes, idx), _mm256_set1_epi8(-127));
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
    const __m256i o = _mm256_maddubs_epi16(_mm256_set1_epi8(kOffset<kT>), xq);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(off), o);
  }
}

template <WeightType kT>
void quantize_typed(const float* x, int64_t t0, int64_t t1, const Acts& a) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < a.KB; ++b) {
      const int64_t i = b * a.T + t;
      quantize_block<kT>(x + t * a.K + b * 32, a.q + i * 32, a.d + i, a.s + i, a.osum + i,
                         a.off + i * 32);
    }
}

// ---------------------------------------------------------------- weight unpacking
// Unpacked blocks (the panel's layout; also the k-quants' one-super-block buffer in decode):
// u: [KB][32] block-order bytes, dw: [KB] f32 scale, m: [KB] f32 min term (Q4_1, Q4_K),
// sc: [KB] Q6_K's two int8 sub-scales as s16 (elements 0..15, 16..31), repeated by the kernel.
struct Unpacked {
  uint8_t* u;
  float* dw;
  float* m;
  int32_t* sc;
};

KVS_AI void store32(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }

// Legacy block `blk` -> block-order bytes (Q8_0: the signed bytes, on VNNI + 128).
template <WeightType kT>
KVS_AI __m256i legacy_bytes(const uint8_t* blk) {
  if constexpr (kT == WeightType::kQ4_0) {
    return nibbles_block_order(blk + 2);
  } else if constexpr (kT == WeightType::kQ4_1) {
    return nibbles_block_order(blk + 4);
  } else if constexpr (kT == WeightType::kQ5_0) {
    return _mm256_or_si256(nibbles_block_order(blk + 6), high_bits_block_order(blk + 2));
  } else {
    static_assert(kT == WeightType::kQ8_0);
    const __m256i w = to_block_order(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    return kVnni ? _mm256_xor_si256(w, _mm256_set1_epi8(-128)) : w;
  }
}

// The same, with the block's d and (Q4_1) m.
template <WeightType kT>
KVS_AI __m256i unpack_legacy(const uint8_t* blk, float* dw, float* m) {
  *dw = f16(blk);
  if constexpr (kT == WeightType::kQ4_1) *m = f16(blk + 2);
  return legacy_bytes<kT>(blk);
}

KVS_AI void q4k_scale_min(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Super-block `blk` (Q4_K / Q6_K) -> its 8 sub-blocks at out (block index 0..7 of out).
template <WeightType kT>
KVS_AI void unpack_super(const uint8_t* blk, const Unpacked& out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if constexpr (kT == WeightType::kQ4_K) {
    const float d = f16(blk), dmin = f16(blk + 2);
    KVS_UNROLL
    for (int p = 0; p < 4; ++p) {
      const __m256i v =
          to_block_order(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p)));
      store32(out.u + 64 * p, _mm256_and_si256(v, m4));
      store32(out.u + 64 * p + 32, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    }
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      q4k_scale_min(j, blk + 4, &sc, &mn);
      out.dw[j] = d * static_cast<float>(sc);
      out.m[j] = -dmin * static_cast<float>(mn);
    }
  } else {
    static_assert(kT == WeightType::kQ6_K);
    const float d = f16(blk + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(blk + 192);
    const __m256i m3 = _mm256_set1_epi8(0x30);
    KVS_UNROLL
    for (int h = 0; h < 2; ++h) {
      const auto* ql = reinterpret_cast<const __m256i*>(blk + 64 * h);
      const __m256i l0 = to_block_order(_mm256_loadu_si256(ql));
      const __m256i l1 = to_block_order(_mm256_loadu_si256(ql + 1));
      const __m256i qh =
          to_block_order(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
      uint8_t* u = out.u + 128 * h;  // sub-blocks 4h..4h+3
      store32(u, _mm256_or_si256(_mm256_and_si256(l0, m4),
                                 _mm256_and_si256(_mm256_slli_epi16(qh, 4), m3)));
      store32(u + 32, _mm256_or_si256(_mm256_and_si256(l1, m4),
                                      _mm256_and_si256(_mm256_slli_epi16(qh, 2), m3)));
      store32(u + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                      _mm256_and_si256(qh, m3)));
      store32(u + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                      _mm256_and_si256(_mm256_srli_epi16(qh, 2), m3)));
      for (int qd = 0; qd < 4; ++qd) {
        const int8_t* sc = scales + 8 * h + 2 * qd;  // sc[0]: elements 0..15, sc[1]: 16..31
        out.dw[4 * h + qd] = d;
        out.sc[4 * h + qd] = static_cast<int32_t>(static_cast<uint16_t>(int16_t{sc[0]}) |
                                                  (uint32_t{static_cast<uint16_t>(sc[1])} << 16));
      }
    }
  }
}

// ---------------------------------------------------------------- the row-interleaved panel
// kGroupRows rows of one 32-element block, interleaved so that one vector holds the same 4
// block-order bytes of each row (lane r = row r): u[k] = bytes 4k..4k+3 of every row. A token's
// 4 activation bytes 4k..4k+3 are broadcast and dotted with u[k] into the int32 lane of each row,
// so that 8 dot products give the rows' exact block sums with no horizontal sum, and the f32
// epilogue (convert, scale, FMA) is one vector operation per kGroupRows rows instead of per row.
// AVX-512 groups 16 rows (one 512-bit vector), the others 8 (256-bit); a lane's operations are
// the same either way, so are the bits.
// Panel block of a group of G rows: u [8][G x 4 bytes], dw [G] f32, m [G] f32 (Q4_1, Q4_K),
// sc [G] int32 (Q6_K) = G x kPanelBlockBytes bytes.
constexpr int64_t kGroupRows = kVnni512 ? 16 : 8;
constexpr int64_t kGroupBlockBytes = kGroupRows * kPanelBlockBytes;
constexpr int kGroupTokens = kVnni512 ? 8 : static_cast<int>(kTileTokens);
static_assert(kPanelRows % kGroupRows == 0 && kPanelBlockBytes == 32 + 3 * 4);
typedef int32_t AliasedI32 __attribute__((may_alias));

// Transposes 8 rows of 8 dwords: out[k] lane r = in[r] lane k.
KVS_AI void transpose8x8(__m256i* v) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
  const __m256i s0 = _mm256_unpacklo_epi64(t0, t2), s1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i s2 = _mm256_unpacklo_epi64(t1, t3), s3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i s4 = _mm256_unpacklo_epi64(t4, t6), s5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i s6 = _mm256_unpacklo_epi64(t5, t7), s7 = _mm256_unpackhi_epi64(t5, t7);
  v[0] = _mm256_permute2x128_si256(s0, s4, 0x20);
  v[1] = _mm256_permute2x128_si256(s1, s5, 0x20);
  v[2] = _mm256_permute2x128_si256(s2, s6, 0x20);
  v[3] = _mm256_permute2x128_si256(s3, s7, 0x20);
  v[4] = _mm256_permute2x128_si256(s0, s4, 0x31);
  v[5] = _mm256_permute2x128_si256(s1, s5, 0x31);
  v[6] = _mm256_permute2x128_si256(s2, s6, 0x31);
  v[7] = _mm256_permute2x128_si256(s3, s7, 0x31);
}

// Rows [n, n + rows) of w (rows <= kGroupRows; the missing rows repeat the last one and are
// never stored), all blocks, into one group of the panel, 8 rows (one 32-byte half) at a time.
template <WeightType kT>
void pack_group(const Weights& w, int64_t n, int64_t rows, uint8_t* group, int64_t KB) {
  constexpr int64_t G = kGroupRows;
  for (int64_t h = 0; h < G / 8; ++h) {
    const uint8_t* src[8];
    for (int64_t r = 0; r < 8; ++r)
      src[r] = w.data + (n + imin(8 * h + r, rows - 1)) * static_cast<int64_t>(w.row_bytes);
    // Block `b`'s part of this half: u[k] at 4G k + 32 h, dw / m / sc at 32 G + 4 G i + 32 h.
    const auto put = [&](int64_t b, __m256i* v, const float* dw, const float* m,
                         const int32_t* sc) {
      uint8_t* out = group + b * kGroupBlockBytes;
      transpose8x8(v);
      KVS_UNROLL
      for (int k = 0; k < 8; ++k) store32(out + 4 * G * k + 32 * h, v[k]);
      std::memcpy(out + 32 * G + 32 * h, dw, 32);
      std::memcpy(out + 36 * G + 32 * h, m, 32);
      std::memcpy(out + 40 * G + 32 * h, sc, 32);
    };
    if constexpr (kSuper<kT>) {
      alignas(32) uint8_t u[8][256];
      alignas(32) float dw[8][8], m[8][8];
      alignas(32) int32_t sc[8][8];
      for (int64_t sb = 0; sb < KB / 8; ++sb) {
        for (int64_t r = 0; r < 8; ++r)
          unpack_super<kT>(src[r] + sb * kBlockBytes<kT>, Unpacked{u[r], dw[r], m[r], sc[r]});
        for (int j = 0; j < 8; ++j) {
          __m256i v[8];
          float fd[8], fm[8];
          int32_t is[8];
          KVS_UNROLL
          for (int r = 0; r < 8; ++r) {
            v[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(u[r] + 32 * j));
            fd[r] = dw[r][j], fm[r] = m[r][j], is[r] = sc[r][j];
          }
          put(sb * 8 + j, v, fd, fm, is);
        }
      }
    } else {
      for (int64_t b = 0; b < KB; ++b) {
        __m256i v[8];
        float fd[8], fm[8] = {};
        const int32_t is[8] = {};
        KVS_UNROLL
        for (int r = 0; r < 8; ++r)
          v[r] = unpack_legacy<kT>(src[r] + b * kBlockBytes<kT>, fd + r, fm + r);
        put(b, v, fd, fm, is);
      }
    }
  }
}

// The vectors of one group: 8 rows in 256 bits, or 16 in 512 (AVX-512).
#if KVS_INT8_VNNI == 2
struct GroupVec {
  using I = __m512i;
  using F = __m512;
  static KVS_AI I load(const uint8_t* p) { return _mm512_load_si512(p); }
  static KVS_AI F loadf(const uint8_t* p) { return _mm512_load_ps(p); }
  static KVS_AI I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static KVS_AI F set1f(float v) { return _mm512_set1_ps(v); }
  static KVS_AI F zero() { return _mm512_setzero_ps(); }
  static KVS_AI I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static KVS_AI I maddubs(I u, I s) { return _mm512_maddubs_epi16(u, s); }
  static KVS_AI I madd(I a, I b) { return _mm512_madd_epi16(a, b); }
  static KVS_AI I sub16(I a, I b) { return _mm512_sub_epi16(a, b); }
  static KVS_AI I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static KVS_AI F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static KVS_AI F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static KVS_AI F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static KVS_AI void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
};
#else
struct GroupVec {
  using I = __m256i;
  using F = __m256;
  static KVS_AI I load(const uint8_t* p) {
    return _mm256_load_si256(reinterpret_cast<const I*>(p));
  }
  static KVS_AI F loadf(const uint8_t* p) {
    return _mm256_load_ps(reinterpret_cast<const float*>(p));
  }
  static KVS_AI I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static KVS_AI F set1f(float v) { return _mm256_set1_ps(v); }
  static KVS_AI F zero() { return _mm256_setzero_ps(); }
  static KVS_AI I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static KVS_AI I maddubs(I u, I s) { return _mm256_maddubs_epi16(u, s); }
  static KVS_AI I madd(I a, I b) { return _mm256_madd_epi16(a, b); }
  static KVS_AI I sub16(I a, I b) { return _mm256_sub_epi16(a, b); }
#if KVS_INT8_VNNI == 1
  static KVS_AI I dpbusd(I acc, I u, I s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#endif
  static KVS_AI F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static KVS_AI F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static KVS_AI F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static KVS_AI void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
};
#endif

// isum += each lane's row dotted with the token's bytes 4k..4k+3 (bx, broadcast), exactly.
template <WeightType kT>
KVS_AI GroupVec::I group_dot(GroupVec::I isum, GroupVec::I u, GroupVec::I bx, int32_t off,
                             GroupVec::I sc) {
  using V = GroupVec;
  if constexpr (kT == WeightType::kQ6_K) {
    // Pairs of the two 16-element halves, each with its own int8 sub-scale.
    return V::add(isum, V::madd(V::sub16(V::maddubs(u, bx), V::set1(off)), sc));
  } else {
    (void)off, (void)sc;
#if KVS_INT8_VNNI != 0
    return V::dpbusd(isum, u, bx);
#else
    if constexpr (kT == WeightType::kQ8_0)  // signed weights: |w| x sign(x, w)
      return V::add(isum, V::madd(V::maddubs(_mm256_abs_epi8(u), _mm256_sign_epi8(bx, u)),
                                  _mm256_set1_epi16(1)));
    return V::add(isum, V::madd(V::maddubs(u, bx), _mm256_set1_epi16(1)));
#endif
  }
}

// y[(t0 + t) * N + n0 + r] for t < RT, r < rn <= kGroupRows, from one panel group. Per (row,
// token) and block b in order: isum_b exact in int32, then acc = fma(f32(isum_b), dw_b * dx_b,
// acc) and, for Q4_1 / Q4_K, acc = fma(m_b, s_b, acc): matmul.h's arithmetic on every path.
template <WeightType kT, int RT>
__attribute__((noinline)) void group_tile(const uint8_t* group, const Acts& a, int64_t t0, float* y,
                                          int64_t N, int64_t n0, int rn) {
  using V = GroupVec;
  constexpr int64_t G = kGroupRows;
  const int64_t KB = a.KB, T = a.T;
  V::F acc[RT];
  KVS_UNROLL
  for (int t = 0; t < RT; ++t) acc[t] = V::zero();
  for (int64_t b = 0; b < KB; ++b) {
    const uint8_t* pb = group + b * kGroupBlockBytes;
    // This block of the tile's tokens: one pointer each, the tokens at constant offsets.
    const int64_t i0 = b * T + t0;
    const int8_t* xq = a.q + i0 * 32;
    const uint8_t* xo = a.off + i0 * 32;
    V::I isum[RT];
    KVS_UNROLL
    for (int t = 0; t < RT; ++t) isum[t] = V::set1(a.osum[i0 + t]);
    V::I sc{};
    if constexpr (kT == WeightType::kQ6_K) sc = V::load(pb + 40 * G);
    KVS_UNROLL
    for (int k = 0; k < 8; ++k) {
      const V::I u = V::load(pb + 4 * G * k);
      KVS_UNROLL
      for (int t = 0; t < RT; ++t) {
        // Plain (may_alias) loads, which the compiler can fold into the dot product as an
        // embedded broadcast.
        const int32_t x4 = *reinterpret_cast<const AliasedI32*>(xq + 32 * t + 4 * k);
        const int32_t o4 =
            kT == WeightType::kQ6_K ? *reinterpret_cast<const AliasedI32*>(xo + 32 * t + 4 * k) : 0;
        isum[t] = group_dot<kT>(isum[t], u, V::set1(x4), o4, sc);
      }
    }
    const V::F dw = V::loadf(pb + 32 * G);
    KVS_UNROLL
    for (int t = 0; t < RT; ++t) {
      acc[t] = V::fmadd(V::cvt(isum[t]), V::mul(dw, V::set1f(a.d[i0 + t])), acc[t]);
      if constexpr (kHasMin<kT>)
        acc[t] = V::fmadd(V::loadf(pb + 36 * G), V::set1f(a.s[i0 + t]), acc[t]);
    }
  }
  KVS_UNROLL
  for (int t = 0; t < RT; ++t) {
    float* out = y + (t0 + t) * N + n0;
    if (rn == G) {
      V::storeu(out, acc[t]);
    } else {
      alignas(64) float tmp[G];
      V::storeu(tmp, acc[t]);
      for (int r = 0; r < rn; ++r) out[r] = tmp[r];
    }
  }
}

// ---------------------------------------------------------------- small steps
// Steps of at most kDirectMaxT tokens (decode) would pay more for packing the panel than they
// save: they read the weights straight from the GGUF bytes, 8 rows at a time. Each row's block is
// dotted with the token's block into 8 partial int32 lanes, and the 8 rows' lanes are reduced
// to one vector of exact block sums (lane r = row r); the f32 epilogue is the panel kernel's.

// The low 16 bits of each of 8 int32 lanes, as 8 x 16 bits (AVX2 has no vpmovdw).
KVS_AI __m128i low16_of_lanes(__m256i v) {
  const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
  return _mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
}

// lane r of the result = the sum of v[r]'s 8 lanes (exact int32 additions).
KVS_AI __m256i row_sums8(const __m256i* v) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// One row's block (block-order bytes u) with one token's block x: 8 partial int32 lanes of the
// exact sum, without the osum start (Q6_K: with its pair offsets `off` and sub-scales).
template <WeightType kT>
KVS_AI __m256i direct_dot(__m256i u, __m256i x, __m256i off, __m256i sc) {
  if constexpr (kT == WeightType::kQ6_K) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, x), off), sc);
  } else if constexpr (kT == WeightType::kQ8_0 && !kVnni) {
    (void)off, (void)sc;
    return dot_u8s8(_mm256_abs_epi8(u), _mm256_sign_epi8(x, u));
  } else {
    (void)off, (void)sc;
    return dot_u8s8(u, x);
  }
}

// Rows [n, n + rn) (rn <= 8; missing rows repeat the last and are not stored) x tokens
// [t0, t0 + NT), straight from the GGUF bytes.
template <WeightType kT, int NT>
__attribute__((noinline)) void direct_group(const Weights& w, const Acts& a, int64_t n, int rn,
                                            int64_t t0, float* y) {
  const int64_t KB = a.KB, T = a.T;
  const uint8_t* src[8];
  for (int r = 0; r < 8; ++r)
    src[r] = w.data + (n + (r < rn ? r : rn - 1)) * static_cast<int64_t>(w.row_bytes);
  // Byte offsets of the rows from row 0 (the gather of their scales).
  const __m256i row_off = _mm256_setr_epi32(
      0, static_cast<int32_t>(src[1] - src[0]), static_cast<int32_t>(src[2] - src[0]),
      static_cast<int32_t>(src[3] - src[0]), static_cast<int32_t>(src[4] - src[0]),
      static_cast<int32_t>(src[5] - src[0]), static_cast<int32_t>(src[6] - src[0]),
      static_cast<int32_t>(src[7] - src[0]));
  __m256 acc[NT];
  KVS_UNROLL
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  alignas(32) uint8_t su[kSuper<kT> ? 8 : 1][kSuper<kT> ? 256 : 32];
  alignas(32) float sdw[8][8], sm[8][8];
  alignas(32) int32_t ssc[8][8];
  for (int64_t b = 0; b < KB; ++b) {
    // The 8 rows are one contiguous region read as 8 interleaved short streams, which the
    // hardware prefetchers follow poorly once the matrix comes from DRAM (the Q8_0 lm_head).
    // Prefetch the same region linearly, at the rate it is consumed, kPrefetchBytes ahead.
    if (!kSuper<kT> || b % 8 == 0) {
      const uint8_t* pf = src[0] + kPrefetchBytes + (kSuper<kT> ? b / 8 : b) * 8 * kBlockBytes<kT>;
      for (int64_t o = 0; o < 8 * kBlockBytes<kT>; o += 64) __builtin_prefetch(pf + o);
    }
    __m256i u[8];
    __m256 dwv, mv = _mm256_setzero_ps();
    int32_t sc[8] = {};  // Q6_K's sub-scale pairs
    if constexpr (kSuper<kT>) {
      const int j = static_cast<int>(b % 8);
      if (j == 0)
        for (int r = 0; r < 8; ++r)
          unpack_super<kT>(src[r] + (b / 8) * kBlockBytes<kT>,
                           Unpacked{su[r], sdw[r], sm[r], ssc[r]});
      alignas(32) float dw[8], m[8];
      KVS_UNROLL
      for (int r = 0; r < 8; ++r) {
        u[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(su[r] + 32 * j));
        dw[r] = sdw[r][j], m[r] = sm[r][j], sc[r] = ssc[r][j];
      }
      dwv = _mm256_load_ps(dw);
      mv = _mm256_load_ps(m);
    } else {
      KVS_UNROLL
      for (int r = 0; r < 8; ++r) u[r] = legacy_bytes<kT>(src[r] + b * kBlockBytes<kT>);
      // The 8 rows' f16 d (and Q4_1's m) gathered in one instruction: 8 scalar stores read back
      // as one vector would stall on store forwarding at every block.
      const __m256i dm = _mm256_i32gather_epi32(
          reinterpret_cast<const int*>(src[0] + b * kBlockBytes<kT>), row_off, 1);
      dwv = _mm256_cvtph_ps(low16_of_lanes(dm));
      if constexpr (kHasMin<kT>) mv = _mm256_cvtph_ps(low16_of_lanes(_mm256_srli_epi32(dm, 16)));
    }
    KVS_UNROLL
    for (int t = 0; t < NT; ++t) {
      const int64_t i = b * T + t0 + t;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + i * 32));
      __m256i off = _mm256_setzero_si256();
      if constexpr (kT == WeightType::kQ6_K)
        off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.off + i * 32));
      __m256i d[8];
      KVS_UNROLL
      for (int r = 0; r < 8; ++r) d[r] = direct_dot<kT>(u[r], x, off, _mm256_set1_epi32(sc[r]));
      const __m256i isum = _mm256_add_epi32(row_sums8(d), _mm256_set1_epi32(a.osum[i]));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dwv, _mm256_set1_ps(a.d[i])),
                               acc[t]);
      if constexpr (kHasMin<kT>) acc[t] = _mm256_fmadd_ps(mv, _mm256_set1_ps(a.s[i]), acc[t]);
    }
  }
  KVS_UNROLL
  for (int t = 0; t < NT; ++t) {
    float* out = y + (t0 + t) * w.rows + n;
    if (rn == 8) {
      _mm256_storeu_ps(out, acc[t]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[t]);
      for (int r = 0; r < rn; ++r) out[r] = tmp[r];
    }
  }
}

template <WeightType kT, int NT>
void direct_rows(const Weights& w, const Acts& a, int64_t n0, int64_t n1, int64_t t0, float* y) {
  for (int64_t n = n0; n < n1; n += 8)
    direct_group<kT, NT>(w, a, n, static_cast<int>(imin(8, n1 - n)), t0, y);
}

// ---------------------------------------------------------------- driver
template <WeightType kT>
void gemm_typed(const Weights& w, const Acts& a, int64_t n0, int64_t n1, int64_t t0, int64_t t1,
                float* y, uint8_t* panel) {
  switch (t1 - t0) {
    case 1: return direct_rows<kT, 1>(w, a, n0, n1, t0, y);
    case 2: return direct_rows<kT, 2>(w, a, n0, n1, t0, y);
    case 3: return direct_rows<kT, 3>(w, a, n0, n1, t0, y);
    case 4: return direct_rows<kT, 4>(w, a, n0, n1, t0, y);
    default: break;
  }
  static_assert(kDirectMaxT == 4);
  const int64_t KB = a.KB;
  for (int64_t p0 = n0; p0 < n1; p0 += kPanelRows) {
    const int64_t np = imin(kPanelRows, n1 - p0);
    for (int64_t r = 0; r < np; r += kGroupRows)
      pack_group<kT>(w, p0 + r, imin(kGroupRows, np - r),
                     panel + (r / kGroupRows) * KB * kGroupBlockBytes, KB);
    for (int64_t tt = t0; tt < t1; tt += kGroupTokens) {
      const int rt = static_cast<int>(imin(kGroupTokens, t1 - tt));
      for (int64_t r = 0; r < np; r += kGroupRows) {
        const uint8_t* group = panel + (r / kGroupRows) * KB * kGroupBlockBytes;
        const int rn = static_cast<int>(imin(kGroupRows, np - r));
        // The last token tile as narrow as its tokens. Each (row, token) sum runs the same
        // operations in the same order whatever the tile's width: the bits do not change.
        switch (rt) {
          case 1: group_tile<kT, 1>(group, a, tt, y, w.rows, p0 + r, rn); break;
          case 2: group_tile<kT, 2>(group, a, tt, y, w.rows, p0 + r, rn); break;
          case 3: group_tile<kT, 3>(group, a, tt, y, w.rows, p0 + r, rn); break;
#if KVS_INT8_VNNI == 2
          case 4: group_tile<kT, 4>(group, a, tt, y, w.rows, p0 + r, rn); break;
          case 5: group_tile<kT, 5>(group, a, tt, y, w.rows, p0 + r, rn); break;
          case 6: group_tile<kT, 6>(group, a, tt, y, w.rows, p0 + r, rn); break;
          case 7: group_tile<kT, 7>(group, a, tt, y, w.rows, p0 + r, rn); break;
#endif
          default: group_tile<kT, kGroupTokens>(group, a, tt, y, w.rows, p0 + r, rn);
        }
      }
    }
  }
}

void gemm(const Weights& w, const Acts& a, int64_t n0, int64_t n1, int64_t t0, int64_t t1, float* y,
          uint8_t* panel) {
  switch (w.type) {
    case WeightType::kQ4_0: return gemm_typed<WeightType::kQ4_0>(w, a, n0, n1, t0, t1, y, panel);
    case WeightType::kQ4_1: return gemm_typed<WeightType::kQ4_1>(w, a, n0, n1, t0, t1, y, panel);
    case WeightType::kQ5_0: return gemm_typed<WeightType::kQ5_0>(w, a, n0, n1, t0, t1, y, panel);
    case WeightType::kQ8_0: return gemm_typed<WeightType::kQ8_0>(w, a, n0, n1, t0, t1, y, panel);
    case WeightType::kQ4_K: return gemm_typed<WeightType::kQ4_K>(w, a, n0, n1, t0, t1, y, panel);
    case WeightType::kQ6_K: return gemm_typed<WeightType::kQ6_K>(w, a, n0, n1, t0, t1, y, panel);
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
