// The score pass of paged attention over many query rows at once (one copy per SIMD target): f16
// keys taken 16 at a time, converted and transposed once into a tile of [head_dim][16 keys], which
// every pass of four rows then reads with one key per lane. Each score is the same float as
// ScoreKeys<ReadF16> gives (kernels/attention_key_scores-inl.h): lane l of the row kernel sums
// q[16c + l] k[16c + l] over the chunks c in order, and Reduce4 adds the 16 lane sums in a fixed
// tree; here the 16 lane sums of 16 keys are 16 vectors, built by the same fused multiply-adds in
// the same order, and added in the same tree lane-wise, so the horizontal sums (four-fifths of the
// row kernel's non-FMA work at head dim 64) disappear. Only targets with 16 float lanes, whose
// tree this is (AVX-512); elsewhere KVS_ATTENTION_KEY_TILES is 0. Included by paged_attention.cpp
// after kernels/attention_key_scores-inl.h, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_KEY_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_KEY_TILES_INL_H_
#undef KVS_KERNELS_ATTENTION_KEY_TILES_INL_H_
#else
#define KVS_KERNELS_ATTENTION_KEY_TILES_INL_H_
#endif

#include <cstdint>

#include <hwy/highway.h>

#include "kernels/paged_attention_args.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int32_t kTileKeys = 16;

#undef KVS_ATTENTION_KEY_TILES
#if HWY_TARGET <= HWY_AVX3 && HWY_TARGET != HWY_SCALAR && HWY_ARCH_X86
#define KVS_ATTENTION_KEY_TILES 1

// r[i] = column i of the 16 x 16 matrix whose rows r held.
static HWY_INLINE void Transpose16(__m512 r[16]) {
  __m512 t[16], u[16], v[16];
  KVS_UNROLL
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  KVS_UNROLL
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  KVS_UNROLL
  for (int i = 0; i < 2; ++i) KVS_UNROLL
  for (int j = 0; j < 4; ++j) {
    v[8 * i + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0x88);
    v[8 * i + 4 + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0xDD);
  }
  KVS_UNROLL
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v[j], v[8 + j], 0xDD);
  }
}

// tile[d][u] = key j + u's element d (f16 -> f32, exact) for the keys [j, j + n) of token t's kv
// head kvh, zeros for u >= n. tile: [D][16], 64-byte aligned.
static void BuildKeyTile(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, int32_t j, int32_t n,
                         float* tile) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim, bs = kv.block_size;
  const uint32_t* table = a.block_table[t];
  const uint8_t* rows[kTileKeys];
  for (int32_t u = 0; u < kTileKeys; ++u) {
    const int32_t p = j + u;
    rows[u] = u < n ? kv.k_head(table[p / bs], a.layer, kvh) + uint64_t(p % bs) * kv.k_vector_bytes
                    : nullptr;
  }
  for (uint32_t c = 0; c < D; c += 16) {
    __m512 r[16];
    KVS_UNROLL
    for (int u = 0; u < 16; ++u)
      r[u] = rows[u] != nullptr ? _mm512_cvtph_ps(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(rows[u] + 2 * c)))
                                : _mm512_setzero_ps();
    Transpose16(r);
    KVS_UNROLL
    for (int l = 0; l < 16; ++l) _mm512_store_ps(tile + (c + l) * 16, r[l]);
  }
}

// Lane sums P_l (l = 4b + m) of NG rows for the tile's 16 keys: fma over the chunks c in order,
// from zero, as KeyDot's lane l.
template <int NG, uint32_t kD>
static HWY_INLINE void LaneSums(const float* tile, const float* q, uint32_t D, int l, __m512* p) {
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) p[g] = _mm512_setzero_ps();
  const uint32_t n = kD != 0 ? kD : D;
  KVS_UNROLL
  for (uint32_t c = 0; c < n; c += 16) {
    const __m512 k = _mm512_load_ps(tile + (c + l) * 16);
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) p[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * n + c + l]), k, p[g]);
  }
}

// S_b = (P_4b + P_4b+2) + (P_4b+1 + P_4b+3): Reduce4's sum within one 128-bit block b.
template <int NG, uint32_t kD>
static HWY_INLINE void BlockSums(const float* tile, const float* q, uint32_t D, int b, __m512* s) {
  __m512 p0[NG], p2[NG], p1[NG], p3[NG];
  LaneSums<NG, kD>(tile, q, D, 4 * b + 0, p0);
  LaneSums<NG, kD>(tile, q, D, 4 * b + 2, p2);
  LaneSums<NG, kD>(tile, q, D, 4 * b + 1, p1);
  LaneSums<NG, kD>(tile, q, D, 4 * b + 3, p3);
  KVS_UNROLL
  for (int g = 0; g < NG; ++g)
    s[g] = _mm512_add_ps(_mm512_add_ps(p0[g], p2[g]), _mm512_add_ps(p1[g], p3[g]));
}

// scores[g * stride + u] for lo <= u < n: the tile's keys against NG query rows (q: [NG][D]),
// times `factor`, in Reduce4's tree: (S_0 + S_2) + (S_1 + S_3). Only those lanes are stored.
template <int NG, uint32_t kD>
static void TileScores(const float* tile, const float* q, uint32_t D, float factor, int32_t lo,
                       int32_t n, float* scores, int32_t stride) {
  __m512 a[NG], b[NG];
  BlockSums<NG, kD>(tile, q, D, 0, a);
  BlockSums<NG, kD>(tile, q, D, 2, b);
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) a[g] = _mm512_add_ps(a[g], b[g]);
  __m512 c[NG];
  BlockSums<NG, kD>(tile, q, D, 1, b);
  BlockSums<NG, kD>(tile, q, D, 3, c);
  const __m512 f = _mm512_set1_ps(factor);
  const __mmask16 m = static_cast<__mmask16>(((1u << n) - 1) & ~((1u << lo) - 1));
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) {
    const __m512 s = _mm512_mul_ps(_mm512_add_ps(a[g], _mm512_add_ps(b[g], c[g])), f);
    _mm512_mask_storeu_ps(scores + g * stride, m, s);
  }
}

template <int NG>
static void TileScoresD(const float* tile, const float* q, uint32_t D, float factor, int32_t lo,
                        int32_t n, float* scores, int32_t stride) {
  if (D == 64) return TileScores<NG, 64>(tile, q, D, factor, lo, n, scores, stride);
  if (D == 256) return TileScores<NG, 256>(tile, q, D, factor, lo, n, scores, stride);
  return TileScores<NG, 0>(tile, q, D, factor, lo, n, scores, stride);
}
#else
#define KVS_ATTENTION_KEY_TILES 0
#endif

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
