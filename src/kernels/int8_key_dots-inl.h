// The VNNI kernels of kernels/int8_key_dots.h, raw intrinsics instantiated once per ISA by
// int8_key_dots_avx512vnni.cpp (KVS_KD_VNNI 2: 512-bit vpdpbusd) and int8_key_dots_avxvnni.cpp
// (KVS_KD_VNNI 1: VEX 256-bit), each compiled with its own target flags.
//
// vpdpbusd multiplies unsigned by signed bytes, and the keys are the unsigned side:
// - int8 keys: each key byte k is flipped to k + 128 (one xor), so a lane accumulates
//   sum (k + 128) q, and the query's 128 * sum q is subtracted once per score;
// - 4-bit channel rows: each nibble c in [0, 15] becomes a byte (a shift and a mask), a lane
//   accumulates sum c q, and 8 * sum q is subtracted, leaving sum (c - 8) q.
// Four keys are scored together for all heads: one load per key chunk, one vpdpbusd per (key,
// head, chunk), then the lanes of the four keys of a head are reduced together (two rounds of
// interleaves and a fold) into four sums.
// GCC 12 reports the _mm512_undefined_epi32() pass-through operand inside avx512fintrin.h's
// unpack and extract intrinsics as "maybe uninitialized" once they are inlined here (a false
// positive: those lanes are never read). The pragma must precede the header's first inclusion.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same for broadcast, permute, widen and narrow intrinsics, reported as "used uninitialized".
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/int8_key_dots.h"

#if !defined(KVS_KD_NS) || !defined(KVS_KD_VNNI)
#error "define KVS_KD_NS and KVS_KD_VNNI before including int8_key_dots-inl.h"
#endif

namespace kvs::int8_key_dots::KVS_KD_NS {
namespace {

#if KVS_KD_VNNI == 2
using V = __m512i;
constexpr uint32_t kChunk = 64;
inline V Load(const void* p) { return _mm512_loadu_si512(p); }
inline V Zero() { return _mm512_setzero_si512(); }
inline V Flip(V x) { return _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80))); }
inline V Dot(V acc, V u, V s) { return _mm512_dpbusd_epi32(acc, u, s); }
// (a0, a1, a2, a3) partial sums in every 128-bit block -> the four sums.
inline __m128i Fold(V u) {
  const __m256i y = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
}
inline V UnpackLo32(V a, V b) { return _mm512_unpacklo_epi32(a, b); }
inline V UnpackHi32(V a, V b) { return _mm512_unpackhi_epi32(a, b); }
inline V UnpackLo64(V a, V b) { return _mm512_unpacklo_epi64(a, b); }
inline V UnpackHi64(V a, V b) { return _mm512_unpackhi_epi64(a, b); }
inline V Add(V a, V b) { return _mm512_add_epi32(a, b); }
#else
using V = __m256i;
constexpr uint32_t kChunk = 32;
inline V Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline V Zero() { return _mm256_setzero_si256(); }
inline V Flip(V x) { return _mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80))); }
inline V Dot(V acc, V u, V s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
inline __m128i Fold(V u) {
  return _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
}
inline V UnpackLo32(V a, V b) { return _mm256_unpacklo_epi32(a, b); }
inline V UnpackHi32(V a, V b) { return _mm256_unpackhi_epi32(a, b); }
inline V UnpackLo64(V a, V b) { return _mm256_unpacklo_epi64(a, b); }
inline V UnpackHi64(V a, V b) { return _mm256_unpackhi_epi64(a, b); }
inline V Add(V a, V b) { return _mm256_add_epi32(a, b); }
#endif

// The unsigned side of a chunk of kChunk products, and the query chunk it pairs with.
struct Int8Keys {  // kChunk key bytes, k + 128
  static constexpr uint32_t kBytes = kChunk;
  static constexpr int32_t kOffset = 128;
  static inline V Key(const uint8_t* p) { return Flip(Load(p)); }
  static inline V Query(V q) { return q; }
};
struct Q4Rows {  // kChunk codes in kChunk / 2 bytes of q4_0 blocks (16 bytes per 32 codes)
  static constexpr uint32_t kBytes = kChunk / 2;
  static constexpr int32_t kOffset = 8;
#if KVS_KD_VNNI == 2
  // Two blocks' 32 bytes in both halves; the upper half shifted by 4: the 128-bit lanes hold the
  // codes of elements 0-15, 32-47 (low nibbles), 16-31, 48-63 (high nibbles).
  static inline V Key(const uint8_t* p) {
    const V b = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const V counts = _mm512_inserti64x4(Zero(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(b, counts), _mm512_set1_epi8(0x0F));
  }
  // The query's 64 bytes in element order, lanes (0, 1, 2, 3) -> (0, 2, 1, 3): Key's order.
  static inline V Query(V q) { return _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(3, 1, 2, 0)); }
#else
  // One block's 16 bytes: low nibbles (elements 0-15), then high nibbles (16-31).
  static inline V Key(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
  }
  static inline V Query(V q) { return q; }
#endif
};

// The four lane sums of a0..a3 (exact int32 arithmetic, any order).
inline __m128i Reduce4(V a0, V a1, V a2, V a3) {
  const V t01 = Add(UnpackLo32(a0, a1), UnpackHi32(a0, a1));
  const V t23 = Add(UnpackLo32(a2, a3), UnpackHi32(a2, a3));
  return Fold(Add(UnpackLo64(t01, t23), UnpackHi64(t01, t23)));
}

// Four keys' sums as floats (exact: |sum| < 2^24) at o[0, rest).
inline void StoreSums(__m128i sums, float* o, int rest) {
  const __m128 f = _mm_cvtepi32_ps(sums);
  if (rest == 4) {
    _mm_storeu_ps(o, f);
  } else {
    alignas(16) float tmp[4];
    _mm_store_ps(tmp, f);
    for (int u = 0; u < rest; ++u) o[u] = tmp[u];
  }
}

// Four keys' accumulators for NG heads, zeroed (a key's lanes that stay zero add nothing).
template <int NG>
inline void ZeroSums(V (&acc)[4][NG]) {
#pragma GCC unroll 16
  for (int u = 0; u < 4; ++u)
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) acc[u][g] = Zero();
}

// Prefetch lines spread over the call: `per` lines before each group of four keys.
struct Cursor {
  const uint8_t* p[2];
  uint64_t left[2];
  uint32_t per;
  Cursor(const Prefetch& pf, int32_t n) {
    for (int i = 0; i < 2; ++i) {
      p[i] = pf.p[i];
      left[i] = pf.p[i] != nullptr ? pf.bytes[i] : 0;
    }
    const uint64_t lines = (left[0] + 63) / 64 + (left[1] + 63) / 64;
    const uint64_t steps = std::max<int32_t>(1, (n + 3) / 4);
    per = static_cast<uint32_t>((lines + steps - 1) / steps);
  }
  inline void Issue() {
    uint32_t lines = per;
    for (int i = 0; i < 2 && lines > 0; ++i) {
      while (left[i] > 0 && lines > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(p[i]), _MM_HINT_T1);
        p[i] += 64;
        left[i] = left[i] > 64 ? left[i] - 64 : 0;
        --lines;
      }
    }
  }
};

// kC: chunks per key known at compile time (1, 2), or 0 for a runtime count. K: Int8Keys or
// Q4Rows, key j's chunk c at keys + j * key_bytes + c * K::kBytes.
template <class K, int NG, uint32_t kC>
void DotsNG(const int8_t* q, const int32_t* qsum, uint32_t D, const uint8_t* keys,
            uint64_t key_bytes, int32_t n, float* out, int64_t out_stride, const Prefetch& pf) {
  const uint32_t C = kC != 0 ? kC : D / kChunk;
  __m128i corr[NG];
  for (int g = 0; g < NG; ++g) corr[g] = _mm_set1_epi32(K::kOffset * qsum[g]);
  Cursor cursor(pf, n);
  for (int32_t j = 0; j < n; j += 4) {
    cursor.Issue();
    const int rest = std::min<int32_t>(4, n - j);
    V acc[4][NG];
    ZeroSums(acc);
    for (uint32_t c = 0; c < C; ++c) {
      V qv[NG];
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) qv[g] = K::Query(Load(q + g * D + c * kChunk));
      if (rest == 4) {
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          const V k = K::Key(keys + (j + u) * key_bytes + c * K::kBytes);
#pragma GCC unroll 4
          for (int g = 0; g < NG; ++g) acc[u][g] = Dot(acc[u][g], k, qv[g]);
        }
      } else {  // the last 1-3 keys; the other lanes stay zero
        for (int u = 0; u < rest; ++u) {
          const V k = K::Key(keys + (j + u) * key_bytes + c * K::kBytes);
#pragma GCC unroll 4
          for (int g = 0; g < NG; ++g) acc[u][g] = Dot(acc[u][g], k, qv[g]);
        }
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
      StoreSums(_mm_sub_epi32(Reduce4(acc[0][g], acc[1][g], acc[2][g], acc[3][g]), corr[g]),
                out + g * out_stride + j, rest);
  }
}

template <class K, uint32_t kC>
void DotsC(const int8_t* q, const int32_t* qsum, int ng, uint32_t D, const uint8_t* keys,
           uint64_t key_bytes, int32_t n, float* out, int64_t out_stride, const Prefetch& pf) {
  switch (ng) {
    case 1: return DotsNG<K, 1, kC>(q, qsum, D, keys, key_bytes, n, out, out_stride, pf);
    case 2: return DotsNG<K, 2, kC>(q, qsum, D, keys, key_bytes, n, out, out_stride, pf);
    case 3: return DotsNG<K, 3, kC>(q, qsum, D, keys, key_bytes, n, out, out_stride, pf);
    default: return DotsNG<K, 4, kC>(q, qsum, D, keys, key_bytes, n, out, out_stride, pf);
  }
}

template <class K>
void DotsK(const int8_t* q, const int32_t* qsum, int ng, uint32_t D, const uint8_t* keys,
           uint64_t key_bytes, int32_t n, float* out, int64_t out_stride, const Prefetch& pf) {
  switch (D / kChunk) {
    case 1: return DotsC<K, 1>(q, qsum, ng, D, keys, key_bytes, n, out, out_stride, pf);
    case 2: return DotsC<K, 2>(q, qsum, ng, D, keys, key_bytes, n, out, out_stride, pf);
    default: return DotsC<K, 0>(q, qsum, ng, D, keys, key_bytes, n, out, out_stride, pf);
  }
}

void Q4RowDots(const int8_t* q, const int32_t* qsum, int ng, uint32_t D, const uint8_t* rows,
               int32_t n, float* out, int64_t out_stride, const Prefetch& pf) {
  DotsK<Q4Rows>(q, qsum, ng, D, rows, D / 2, n, out, out_stride, pf);
}

#if KVS_KD_VNNI == 2
// int2mix_chan64 rows (kernels/int8_key_dots.h's MixRowDotsFn), 64 channels per chunk. A row's
// 16 code bytes are broadcast to the four 128-bit lanes and lane L shifted by 2 L, so byte b of
// lane L is channel 4 b + L's code; the query is laid out the same way once per call. The third
// bits become bytes of 4 (one masked set) against the wide channels' queries in their order, in
// the same accumulator.
template <int NG, uint32_t kC>
void MixRowsNG(const int8_t* q, const uint8_t* steps, const uint8_t* rows, const uint8_t* thirds,
               int32_t n, float* out, int64_t out_stride, const Prefetch& pf) {
  constexpr uint32_t D = 64 * kC, row_bytes = D / 4, third_bytes = D / 32;
  // Per chunk of 64 channels: the wide ones (their f16 steps' sign bits), and the query in the
  // codes' order: in each 128-bit lane the bytes grouped by channel % 4 (a shuffle), then the
  // 4 x 4 dwords transposed across the lanes.
  const V by_lane =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  const V transpose = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  uint64_t wide[kC];
  for (uint32_t c = 0; c < kC; ++c)
    wide[c] = _cvtmask32_u32(_mm512_movepi16_mask(Load(steps + 128 * c))) |
              uint64_t{_cvtmask32_u32(_mm512_movepi16_mask(Load(steps + 128 * c + 64)))} << 32;
  V qp[NG][kC];
  alignas(64) int8_t qw[NG][64 + 16] = {};
  for (int g = 0; g < NG; ++g) {
    uint32_t k = 0;
    for (uint32_t c = 0; c < kC; ++c) {
      const V x = Load(q + g * D + 64 * c);
      qp[g][c] = _mm512_permutexvar_epi32(transpose, _mm512_shuffle_epi8(x, by_lane));
      for (uint32_t p = 0; p < 4; ++p) {  // the wide channels' bytes, 16 channels at a time
        const __mmask16 m = static_cast<__mmask16>(wide[c] >> (16 * p));
        const V w = _mm512_maskz_compress_epi32(
            m, _mm512_cvtepi8_epi32(
                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + g * D + 64 * c + 16 * p))));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qw[g] + k), _mm512_cvtepi32_epi8(w));
        k += static_cast<uint32_t>(__builtin_popcount(m));
      }
    }
  }
  const V counts =
      _mm512_set_epi64(0x0006000600060006, 0x0006000600060006, 0x0004000400040004,
                       0x0004000400040004, 0x0002000200020002, 0x0002000200020002, 0, 0);
  const V three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
  Cursor cursor(pf, n);
  for (int32_t j = 0; j < n; j += 4) {
    cursor.Issue();
    const int rest = std::min<int32_t>(4, n - j);
    V acc[4][NG];
    ZeroSums(acc);
    const auto key = [&](int u) __attribute__((always_inline)) {
      const uint8_t* row = rows + int64_t{j + u} * row_bytes;
#pragma GCC unroll 4
      for (uint32_t c = 0; c < kC; ++c) {
        const V b =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
        const V codes = _mm512_and_si512(_mm512_srlv_epi16(b, counts), three);
#pragma GCC unroll 4
        for (int g = 0; g < NG; ++g) acc[u][g] = Dot(acc[u][g], codes, qp[g][c]);
      }
      uint64_t bits = 0;
      std::memcpy(&bits, thirds + int64_t{j + u} * third_bytes, third_bytes);
      const V t = _mm512_maskz_mov_epi8(bits, four);
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) acc[u][g] = Dot(acc[u][g], t, Load(qw[g]));
    };
    if (rest == 4) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) key(u);
    } else {  // the last 1-3 keys; the other lanes stay zero
      for (int u = 0; u < rest; ++u) key(u);
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
      StoreSums(Reduce4(acc[0][g], acc[1][g], acc[2][g], acc[3][g]), out + g * out_stride + j,
                rest);
  }
}

template <uint32_t kC>
void MixRowsC(const int8_t* q, int ng, const uint8_t* steps, const uint8_t* rows,
              const uint8_t* thirds, int32_t n, float* out, int64_t out_stride,
              const Prefetch& pf) {
  switch (ng) {
    case 1: return MixRowsNG<1, kC>(q, steps, rows, thirds, n, out, out_stride, pf);
    case 2: return MixRowsNG<2, kC>(q, steps, rows, thirds, n, out, out_stride, pf);
    case 3: return MixRowsNG<3, kC>(q, steps, rows, thirds, n, out, out_stride, pf);
    default: return MixRowsNG<4, kC>(q, steps, rows, thirds, n, out, out_stride, pf);
  }
}

void MixRowDots(const int8_t* q, int ng, uint32_t D, const uint8_t* steps, const uint8_t* rows,
                const uint8_t* thirds, int32_t n, float* out, int64_t out_stride,
                const Prefetch& pf) {
  switch (D / 64) {
    case 1: return MixRowsC<1>(q, ng, steps, rows, thirds, n, out, out_stride, pf);
    case 2: return MixRowsC<2>(q, ng, steps, rows, thirds, n, out, out_stride, pf);
    case 3: return MixRowsC<3>(q, ng, steps, rows, thirds, n, out, out_stride, pf);
    default: return MixRowsC<4>(q, ng, steps, rows, thirds, n, out, out_stride, pf);
  }
}
constexpr MixRowDotsFn kMixRows = &MixRowDots;
#else
constexpr MixRowDotsFn kMixRows = nullptr;  // AVX2 has no 16-bit shift per lane
#endif

}  // namespace

const Kernels& kernels() {
  static const Kernels k{
      .dots = &DotsK<Int8Keys>, .q4_rows = &Q4RowDots, .mix_rows = kMixRows, .chunk = kChunk};
  return k;
}

}  // namespace kvs::int8_key_dots::KVS_KD_NS
