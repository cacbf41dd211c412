// kernels/trellis_values.h for AVX512 F + BW + VBMI (and F16C). Compiled with this ISA's target
// flags (CMakeLists.txt); called only when CPUID reports it (trellis_values.cpp).
// GCC 12's AVX-512 headers start some intrinsics from an undefined vector, which it then reports
// as maybe uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "kernels/trellis_values.h"
#include "quant/kv_trellis_groups.h"

namespace kvs::trellis_values {
namespace {

constexpr uint32_t kG = kTrellisGroup;  // 64 elements: one zmm of int8 levels
// Keys decoded per tile, at most: the tile's levels (kTile x D bytes) stay in L1 while every
// chunk of 64 elements passes over them.
constexpr int32_t kTile = 64;
constexpr uint32_t kTileBytes = 16384;  // kTile keys of D = 256, one key of D = kMaxHeadDim
static_assert(kTileBytes >= kMaxHeadDim);

// The shuffle that gives qword q of the group the plane's bytes from 14 - 2q on (wrapping), and
// the shifts that then take element 8q + j's 8 bits from bit 14 - 2j of its qword. Element
// i = 8q + j's state is the 8 bits of the plane from bit 2 (63 - i) = 126 - 16q - 2j
// (quant/kv_trellis_groups.h): qword q holds the plane's bits from 112 - 16q, byte 14 - 2q, so
// the state starts at bit 14 - 2j of it, and 14 - 2j + 8 <= 64.
struct StateTables {
  alignas(64) uint8_t qword_bytes[64];
  alignas(64) uint8_t shifts[64];
  constexpr StateTables() : qword_bytes(), shifts() {
    for (uint32_t q = 0; q < 8; ++q)
      for (uint32_t k = 0; k < 8; ++k) {
        qword_bytes[8 * q + k] = static_cast<uint8_t>((14 - 2 * q + k) & 15);
        shifts[8 * q + k] = static_cast<uint8_t>(14 - 2 * k);
      }
  }
};
constexpr StateTables kStateTables;

// The tables in registers, and the 256 levels (kTrellisLevels) as four 64-byte tables.
struct Regs {
  __m512i qword_bytes, shifts, levels[4];
  Regs()
      : qword_bytes(_mm512_load_si512(kStateTables.qword_bytes)),
        shifts(_mm512_load_si512(kStateTables.shifts)) {
    for (int i = 0; i < 4; ++i) levels[i] = _mm512_loadu_si512(kTrellisLevels + 64 * i);
  }
};

// The 64 levels (int8) of the group at g: byte i is element i's.
inline __m512i GroupLevels(const Regs& r, const uint8_t* g) {
  // The plane in every 128-bit lane, so that one in-lane byte shuffle builds each qword.
  const __m512i plane =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2)));
  const __m512i words = _mm512_shuffle_epi8(plane, r.qword_bytes);
  const __m512i states = _mm512_multishift_epi64_epi8(r.shifts, words);
  // vpermi2b reads 7 index bits: states 0..127 from the first two tables, 128..255 from the
  // other two, chosen by each state's top bit.
  const __m512i low = _mm512_permutex2var_epi8(r.levels[0], states, r.levels[1]);
  const __m512i high = _mm512_permutex2var_epi8(r.levels[2], states, r.levels[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(states), low, high);
}

inline float ScaleOf(const uint8_t* g) {
  uint16_t h;
  __builtin_memcpy(&h, g, 2);
  return _cvtsh_ss(h) * kTrellisLevelUnit;  // exact: an f16 times a power of two
}

// Phase 1: keys [k0, k1) of the range decoded to levels[(j - k0) * D + e] and
// scales[(j - k0) * groups + group].
void DecodeTile(const PagedKvLayout& kv, const uint32_t* table, uint32_t layer, uint32_t kvh,
                int32_t k0, int32_t k1, int8_t* levels, float* scales) {
  const Regs regs;
  const uint32_t D = kv.head_dim, groups = D / kG, bs = kv.block_size;
  for (int32_t j = k0; j < k1;) {
    const int32_t b = j / static_cast<int32_t>(bs);
    const int32_t end = std::min<int32_t>(k1, (b + 1) * static_cast<int32_t>(bs));
    const uint8_t* vb = kv.v_head(table[b], layer, kvh);
    for (; j < end; ++j) {
      const uint8_t* v = vb + int64_t{j - b * static_cast<int32_t>(bs)} * kv.v_vector_bytes;
      int8_t* lv = levels + size_t(j - k0) * D;
      float* sc = scales + size_t(j - k0) * groups;
      for (uint32_t q = 0; q < groups; ++q) {
        const uint8_t* g = v + q * kTrellisGroupBytes;
        _mm512_store_si512(lv + q * kG, GroupLevels(regs, g));
        sc[q] = ScaleOf(g);
      }
    }
  }
}

// Phase 2: acc[g][e] += p[g][j] x level x scale over the tile's n keys, one group of 64 elements
// (four chunks of 16) at a time, the NG x 4 accumulators in registers across the keys. The same
// operations, in the same order, as the Highway reader's tile (kernels/attention_values-inl.h).
template <int NG>
void AccumulateTile(const int8_t* levels, const float* scales, int32_t n, uint32_t D,
                    const float* p, int32_t len, float* out) {
  const uint32_t groups = D / kG;
  for (uint32_t q = 0; q < groups; ++q) {
    __m512 acc[NG][4];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[g][c] = _mm512_loadu_ps(out + g * D + q * kG + 16 * c);
    for (int32_t j = 0; j < n; ++j) {
      const int8_t* lv = levels + size_t(j) * D + q * kG;
      const __m512 s = _mm512_set1_ps(scales[size_t(j) * groups + q]);
      __m512 w[NG];
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) w[g] = _mm512_set1_ps(p[g * len + j]);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(lv + 16 * c));
        const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s);
#pragma GCC unroll 4
        for (int g = 0; g < NG; ++g) acc[g][c] = _mm512_fmadd_ps(w[g], x, acc[g][c]);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + g * D + q * kG + 16 * c, acc[g][c]);
  }
}

void Accumulate(const PagedKvLayout& kv, const uint32_t* table, uint32_t layer, uint32_t kvh,
                int32_t j0, int32_t j1, const float* p, int ng, float* out) {
  const uint32_t D = kv.head_dim;
  KVS_CHECK(ng >= 1 && ng <= 4 && D % kG == 0 && D <= kMaxHeadDim);
  const int32_t len = j1 - j0;
  if (len <= 0) return;
  const int32_t tile = std::clamp<int32_t>(static_cast<int32_t>(kTileBytes / D), 1, kTile);
  alignas(64) int8_t levels[kTileBytes];
  alignas(64) float scales[kTileBytes / kG];
  for (int32_t k0 = j0; k0 < j1; k0 += tile) {
    const int32_t k1 = std::min(j1, k0 + tile);
    DecodeTile(kv, table, layer, kvh, k0, k1, levels, scales);
    const float* pk = p + (k0 - j0);
    switch (ng) {
      case 1: AccumulateTile<1>(levels, scales, k1 - k0, D, pk, len, out); break;
      case 2: AccumulateTile<2>(levels, scales, k1 - k0, D, pk, len, out); break;
      case 3: AccumulateTile<3>(levels, scales, k1 - k0, D, pk, len, out); break;
      case 4: AccumulateTile<4>(levels, scales, k1 - k0, D, pk, len, out); break;
    }
  }
}

}  // namespace

AccumulateFn accumulate_avx512vbmi() { return &Accumulate; }

}  // namespace kvs::trellis_values
