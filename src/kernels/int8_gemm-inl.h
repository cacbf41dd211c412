// The kernels of kernels/int8_gemm.h, written once and compiled once per ISA: each
// int8_gemm_<isa>.cpp defines KVS_INT8_NS (a namespace of its own, so that no symbol is shared
// between code built for different CPUs) and KVS_INT8_VNNI (0: AVX2 vpmaddubsw + vpmaddwd,
// 1: AVX-VNNI vpdpbusd, 2: AVX512-VNNI vpdpbusd on 256-bit vectors), then includes this file.
// The ISAs differ only in dot_u8s8 / dot_u8s8_acc and in the offset precompute that goes with
// them (kOffKind); tiling, unpacking and every f32 operation are the same code.
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
constexpr int64_t kChunk = 256;            // blocks per chunk of min terms (= matmul.cpp's)
constexpr int64_t kPrefetchBytes = 16384;  // decode: software prefetch distance
constexpr int kDecodeRows = 2;             // decode: rows per pass (16 vector registers)

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
// How a block's offset is applied: not at all, subtracted from the s16 pair sums (precomputed
// off x (x_a + x_b) per activation block), or as the int32 start value of vpdpbusd (precomputed
// -off x (sum of the lane's four x)). Q8_0 on AVX2 has no offset: it uses the sign trick.
enum class Off { kNone, kS16, kS32 };
template <WeightType kT>
constexpr Off kOffKind = kOffset<kT> == 0          ? Off::kNone
                         : kT == WeightType::kQ6_K ? Off::kS16
                         : kT == WeightType::kQ8_0 ? (kVnni ? Off::kS32 : Off::kNone)
                         : kVnni                   ? Off::kS32
                                                   : Off::kS16;
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
KVS_AI void quantize_block(const float* x, int8_t* q, float* d, float* s, uint8_t* off) {
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
  if constexpr (kOffKind<kT> == Off::kS16) {
    const __m256i o = _mm256_maddubs_epi16(_mm256_set1_epi8(kOffset<kT>), xq);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(off), o);
  } else if constexpr (kOffKind<kT> == Off::kS32) {
    const __m256i sum4 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xq), _mm256_set1_epi16(1));
    const __m256i o = _mm256_mullo_epi32(sum4, _mm256_set1_epi32(-kOffset<kT>));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(off), o);
  }
}

template <WeightType kT>
void quantize_typed(const float* x, int64_t t0, int64_t t1, const Acts& a) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < a.KB; ++b)
      quantize_block<kT>(x + t * a.K + b * 32, a.q + t * a.K + b * 32, a.d + t * a.KB + b,
                         a.s + t * a.KB + b, a.off + (t * a.KB + b) * 32);
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

// Legacy block `blk` -> block-order bytes (Q8_0: the signed bytes, on VNNI + 128), d, m.
template <WeightType kT>
KVS_AI __m256i unpack_legacy(const uint8_t* blk, float* dw, float* m) {
  *dw = f16(blk);
  if constexpr (kT == WeightType::kQ4_0) {
    return nibbles_block_order(blk + 2);
  } else if constexpr (kT == WeightType::kQ4_1) {
    *m = f16(blk + 2);
    return nibbles_block_order(blk + 4);
  } else if constexpr (kT == WeightType::kQ5_0) {
    return _mm256_or_si256(nibbles_block_order(blk + 6), high_bits_block_order(blk + 2));
  } else {
    static_assert(kT == WeightType::kQ8_0);
    const __m256i w = to_block_order(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    return kVnni ? _mm256_xor_si256(w, _mm256_set1_epi8(-128)) : w;
  }
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

// Rows [n, n + rows) of w, all blocks, into the panel layout (row stride KB blocks).
template <WeightType kT>
void pack_rows(const Weights& w, int64_t n, int64_t rows, const Unpacked& p, int64_t KB) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w.data + (n + r) * static_cast<int64_t>(w.row_bytes);
    const Unpacked o{p.u + r * KB * 32, p.dw + r * KB, p.m + r * KB, p.sc + r * KB};
    if constexpr (kSuper<kT>) {
      for (int64_t sb = 0; sb < KB / 8; ++sb)
        unpack_super<kT>(row + sb * kBlockBytes<kT>,
                         Unpacked{o.u + sb * 256, o.dw + sb * 8, o.m + sb * 8, o.sc + sb * 8});
    } else {
      for (int64_t b = 0; b < KB; ++b)
        store32(o.u + b * 32, unpack_legacy<kT>(row + b * kBlockBytes<kT>, o.dw + b, o.m + b));
    }
  }
}

// ---------------------------------------------------------------- one block of one pair
struct WBlock {
  __m256i u;    // block-order bytes (Q8_0 on AVX2: signed)
  __m256i abs;  // Q8_0 on AVX2: |u|
  __m256i sc;   // Q6_K: s16 sub-scales (sc0, sc1) repeated
  float dw, m;
};

template <WeightType kT>
KVS_AI void finish_wblock(WBlock* w, int32_t sc) {
  if constexpr (kT == WeightType::kQ8_0 && !kVnni) w->abs = _mm256_abs_epi8(w->u);
  if constexpr (kT == WeightType::kQ6_K) w->sc = _mm256_set1_epi32(sc);
}

// The block's 8 int32 lanes: sum over the lane's 4 elements of (u - offset) x q (Q6_K: times
// the sub-scale of each pair).
template <WeightType kT>
KVS_AI __m256i block_dot(const WBlock& w, __m256i x, __m256i off) {
  if constexpr (kT == WeightType::kQ6_K) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(w.u, x), off), w.sc);
  } else if constexpr (kT == WeightType::kQ8_0 && !kVnni) {
    return dot_u8s8(w.abs, _mm256_sign_epi8(x, w.u));
  } else if constexpr (kOffKind<kT> == Off::kS16) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(w.u, x), off),
                             _mm256_set1_epi16(1));
  } else if constexpr (kOffKind<kT> == Off::kS32) {
#if KVS_INT8_VNNI != 0
    return dot_u8s8_acc(off, w.u, x);
#else
    return off;  // unreachable: kS32 exists only on VNNI
#endif
  } else {
    (void)off;
    return dot_u8s8(w.u, x);
  }
}

// ---------------------------------------------------------------- weight sources
// Panel rows r0.. of an unpacked panel.
template <WeightType kT>
struct PanelSrc {
  Unpacked p;
  int64_t KB;
  KVS_AI void begin(int64_t) {}
  KVS_AI void load(int r, int64_t b, WBlock* w) const {
    w->u = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.u + (r * KB + b) * 32));
    w->dw = p.dw[r * KB + b];
    if constexpr (kHasMin<kT>) w->m = p.m[r * KB + b];
    finish_wblock<kT>(w, kT == WeightType::kQ6_K ? p.sc[r * KB + b] : 0);
  }
};

// RN consecutive rows straight from the GGUF bytes (decode and small batches). Legacy blocks
// are unpacked in registers; a k-quant super-block is unpacked into a small buffer once every 8
// blocks. The rows are prefetched as one linear region, kPrefetchBytes ahead.
template <WeightType kT, int RN>
struct DirectSrc {
  const uint8_t* base;  // row 0
  int64_t row_bytes;
  alignas(32) uint8_t u[kSuper<kT> ? RN : 1][kSuper<kT> ? 256 : 32];
  float dw[RN][8], m[RN][8];
  int32_t sc[RN][8];
  KVS_AI void begin(int64_t b) {
    const uint8_t* pf = base + kPrefetchBytes + (kSuper<kT> ? b / 8 : b) * RN * kBlockBytes<kT>;
    if (!kSuper<kT> || b % 8 == 0)
      for (int64_t o = 0; o < RN * kBlockBytes<kT>; o += 64) __builtin_prefetch(pf + o);
    if constexpr (kSuper<kT>) {
      if (b % 8 == 0) KVS_UNROLL
      for (int r = 0; r < RN; ++r)
        unpack_super<kT>(base + r * row_bytes + (b / 8) * kBlockBytes<kT>,
                         Unpacked{u[r], dw[r], m[r], sc[r]});
    }
  }
  KVS_AI void load(int r, int64_t b, WBlock* w) {
    if constexpr (kSuper<kT>) {
      const int j = static_cast<int>(b % 8);
      w->u = _mm256_load_si256(reinterpret_cast<const __m256i*>(u[r] + 32 * j));
      w->dw = dw[r][j];
      w->m = m[r][j];
      finish_wblock<kT>(w, sc[r][j]);
    } else {
      w->u = unpack_legacy<kT>(base + r * row_bytes + b * kBlockBytes<kT>, &w->dw, &w->m);
      finish_wblock<kT>(w, 0);
    }
  }
};

// ---------------------------------------------------------------- the micro-kernel
// Hides that v is a broadcast: the scale dw x dx then stays one vector multiply per (row, token)
// on broadcasts made once per row and once per token, instead of the scalar multiply and
// broadcast per (row, token) the compiler prefers (one operation more per 32-product dot). The
// product is the same float either way.
#if KVS_INT8_VNNI == 2
KVS_AI void opaque(__m256* v) { __asm__("" : "+v"(*v)); }  // any of the 32 EVEX registers
#else
KVS_AI void opaque(__m256* v) { __asm__("" : "+x"(*v)); }
#endif

// Horizontal sum in Highway's SumOfLanes order: (v0+v4) .. (v3+v7), then (s0+s2) + (s1+s3).
KVS_AI float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// macc += m[i] * xs[i] over whole vectors, mtail over the rest (matmul.cpp's min_dot order).
KVS_AI void min_dot(const float* m, int64_t n, const float* xs, __m256* macc, float* mtail) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    *macc = _mm256_fmadd_ps(_mm256_loadu_ps(m + i), _mm256_loadu_ps(xs + i), *macc);
  for (; i < n; ++i) *mtail += m[i] * xs[i];
}

// y[(t0 + t) * N + n0 + r] for r < rn <= RN, t < RT: one accumulator per (row, token), the
// blocks in order. Every call is exactly RT tokens wide (a short last tile instantiates a
// narrower RT); a row beyond rn (a panel's odd last row) is computed but not stored.
template <WeightType kT, int RN, int RT, class Src>
__attribute__((noinline)) void tile(Src& src, const Acts& a, int64_t t0, float* y, int64_t N,
                                    int64_t n0, int rn) {
  const int64_t KB = a.KB, K = a.K;
  __m256 acc[RN][RT];
  // The min terms' accumulators are touched once per chunk: kept in memory, so that the
  // register file holds acc, the weights and the activations (16 registers on AVX2).
  alignas(32) float macc[RN][RT][8];
  float mtail[RN][RT];
  alignas(32) float mins[RN][kHasMin<kT> ? kChunk : 1];
  KVS_UNROLL
  for (int r = 0; r < RN; ++r) KVS_UNROLL
  for (int t = 0; t < RT; ++t) {
    acc[r][t] = _mm256_setzero_ps();
    _mm256_store_ps(macc[r][t], _mm256_setzero_ps());
    mtail[r][t] = 0.0f;
  }
  for (int64_t c0 = 0; c0 < KB; c0 += kChunk) {
    const int64_t c1 = imin(KB, c0 + kChunk);
    for (int64_t b = c0; b < c1; ++b) {
      src.begin(b);
      WBlock w[RN];
      __m256 dw[RN];
      KVS_UNROLL
      for (int r = 0; r < RN; ++r) {
        src.load(r, b, &w[r]);
        if constexpr (kHasMin<kT>) mins[r][b - c0] = w[r].m;
        dw[r] = _mm256_set1_ps(w[r].dw);
        opaque(&dw[r]);
      }
      KVS_UNROLL
      for (int t = 0; t < RT; ++t) {
        const __m256i x =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + (t0 + t) * K + b * 32));
        __m256i off = _mm256_setzero_si256();
        if constexpr (kOffKind<kT> != Off::kNone)
          off = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(a.off + ((t0 + t) * KB + b) * 32));
        __m256 dx = _mm256_set1_ps(a.d[(t0 + t) * KB + b]);
        opaque(&dx);
        KVS_UNROLL
        for (int r = 0; r < RN; ++r) {
          const __m256 f = _mm256_cvtepi32_ps(block_dot<kT>(w[r], x, off));
          acc[r][t] = _mm256_fmadd_ps(f, _mm256_mul_ps(dw[r], dx), acc[r][t]);
        }
      }
    }
    if constexpr (kHasMin<kT>) {
      for (int r = 0; r < RN; ++r)
        for (int t = 0; t < RT; ++t) {
          __m256 m = _mm256_load_ps(macc[r][t]);
          min_dot(mins[r], c1 - c0, a.s + (t0 + t) * KB + c0, &m, &mtail[r][t]);
          _mm256_store_ps(macc[r][t], m);
        }
    }
  }
  KVS_UNROLL
  for (int r = 0; r < RN; ++r) KVS_UNROLL
  for (int t = 0; t < RT; ++t) {
    if (r >= rn) continue;
    const __m256 sum =
        kHasMin<kT> ? _mm256_add_ps(acc[r][t], _mm256_load_ps(macc[r][t])) : acc[r][t];
    y[(t0 + t) * N + n0 + r] = hsum(sum) + mtail[r][t];
  }
}

// ---------------------------------------------------------------- drivers
template <WeightType kT, int NT>
void direct_rows(const Weights& w, const Acts& a, int64_t n0, int64_t n1, int64_t t0, float* y) {
  constexpr int RN = NT == 1 ? kDecodeRows : static_cast<int>(kTileRows);
  const auto rb = static_cast<int64_t>(w.row_bytes);
  int64_t n = n0;
  for (; n + RN <= n1; n += RN) {
    DirectSrc<kT, RN> src{w.data + n * rb, rb};
    tile<kT, RN, NT>(src, a, t0, y, w.rows, n, RN);
  }
  for (; n < n1; ++n) {
    DirectSrc<kT, 1> src{w.data + n * rb, rb};
    tile<kT, 1, NT>(src, a, t0, y, w.rows, n, 1);
  }
}

template <WeightType kT>
void gemm_typed(const Weights& w, const Acts& a, int64_t n0, int64_t n1, int64_t t0, int64_t t1,
                float* y, uint8_t* panel) {
  switch (t1 - t0) {
    case 1: return direct_rows<kT, 1>(w, a, n0, n1, t0, y);
    case 2: return direct_rows<kT, 2>(w, a, n0, n1, t0, y);
    case 3: return direct_rows<kT, 3>(w, a, n0, n1, t0, y);
    case 4: return direct_rows<kT, 4>(w, a, n0, n1, t0, y);
#if KVS_INT8_VNNI == 2
    // AVX-512 has 32 vector registers: the accumulators of 2 rows x up to 8 tokens still fit
    // beside the weights, so steps of 5-8 tokens skip the panel too (packing 16 rows costs more
    // than it saves when they serve so few tokens). Same per-(row, token) operations: same bits.
    case 5: return direct_rows<kT, 5>(w, a, n0, n1, t0, y);
    case 6: return direct_rows<kT, 6>(w, a, n0, n1, t0, y);
    case 7: return direct_rows<kT, 7>(w, a, n0, n1, t0, y);
    case 8: return direct_rows<kT, 8>(w, a, n0, n1, t0, y);
#endif
    default: break;
  }
  static_assert(kDirectMaxT == 4 && kTileTokens == 4 && kPanelRows % kTileRows == 0);
  const int64_t KB = a.KB;
  const Unpacked p{panel, reinterpret_cast<float*>(panel + kPanelRows * KB * 32),
                   reinterpret_cast<float*>(panel + kPanelRows * KB * 36),
                   reinterpret_cast<int32_t*>(panel + kPanelRows * KB * 40)};
  for (int64_t p0 = n0; p0 < n1; p0 += kPanelRows) {
    const int64_t np = imin(kPanelRows, n1 - p0);
    pack_rows<kT>(w, p0, np, p, KB);
    for (int64_t tt = t0; tt < t1; tt += kTileTokens) {
      const int rt = static_cast<int>(imin(kTileTokens, t1 - tt));
      for (int64_t r = 0; r < np; r += kTileRows) {
        PanelSrc<kT> src{Unpacked{p.u + r * KB * 32, p.dw + r * KB, p.m + r * KB, p.sc + r * KB},
                         KB};
        const int rn = static_cast<int>(imin(kTileRows, np - r));
        // The last token tile as narrow as its tokens: a step of 5 tokens would otherwise cost
        // two full tiles, as much as one of 8. Each (row, token) sum runs the same operations in
        // the same order whatever the tile's width, so the bits do not change.
        switch (rt) {
          case 1: tile<kT, kTileRows, 1>(src, a, tt, y, w.rows, p0 + r, rn); break;
          case 2: tile<kT, kTileRows, 2>(src, a, tt, y, w.rows, p0 + r, rn); break;
          case 3: tile<kT, kTileRows, 3>(src, a, tt, y, w.rows, p0 + r, rn); break;
          default: tile<kT, kTileRows, kTileTokens>(src, a, tt, y, w.rows, p0 + r, rn);
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
// its latency. The empty asm makes the inputs opaque each round (nothing can be hoisted).
int64_t peak_loop(int64_t iters) {
  __m256i acc[12];
  KVS_UNROLL
  for (auto& v : acc) v = _mm256_setzero_si256();
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
  return hsum_epi32(t);
}

#undef KVS_AI
#undef KVS_UNROLL

}  // namespace

const Kernels& kernels() {
  static const Kernels k{&quantize, &gemm, &peak_loop, kVnni512 ? 8 : kDirectMaxT};
  return k;
}

}  // namespace kvs::int8_gemm::KVS_INT8_NS
