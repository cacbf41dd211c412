// Paged attention over the recent-token window's rows (quant/recent_window.h; one copy per SIMD
// target): f16 or int8 rows kept beside the blocks, in the model's own space. Each window row is
// converted once per pass, not once per query head; on AVX-512 the scores of 16 rows are reduced
// together, and the value sums of a kv head's query heads stay in registers across the rows (a
// chunk of the head dim at a time). The scores and sums are the same floats as a loop that
// converts per head and adds to memory: each score is one chain of fused multiply-adds over the
// head dim reduced by SumOfLanes' tree, each output element one chain over the rows in order.
// Included by paged_attention.cpp after kernels/attention_key_tiles-inl.h and
// kernels/attention_softmax-inl.h, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_RECENT_WINDOW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_RECENT_WINDOW_INL_H_
#undef KVS_KERNELS_ATTENTION_RECENT_WINDOW_INL_H_
#else
#define KVS_KERNELS_ATTENTION_RECENT_WINDOW_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <vector>

#include <hwy/highway.h>

#include "kernels/attention_segments.h"
#include "kernels/paged_attention_args.h"
#include "quant/recent_window.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF and VF come from kernels/kv_readers-inl.h.

// A window row's scale (int8: its f16 scale; f16: 1) and its elements as f32 lanes.
static HWY_INLINE float WindowRowScale(const WindowRow& row, uint32_t D) {
  return row.dtype == KvDtype::kInt8 ? ReadInt8::Scale(row.bytes, D) : 1.0f;
}
static HWY_INLINE VF WindowRowLoad(DF df, const WindowRow& row, size_t i) {
  return row.dtype == KvDtype::kInt8 ? ReadInt8::Load(df, row.bytes, i)
                                     : ReadF16::Load(df, row.bytes, i);
}

// Vectors of the head dim per chunk of the value pass: NG x kRecentChunk accumulators, plus the
// chunk's row, stay in registers.
constexpr size_t kRecentChunk = 4;

// acc[g][D] = sum over rows j of p[g][j] x scale_j x v_j, for NG query heads; the rows' values
// converted once per chunk and row.
template <int NG>
static HWY_NOINLINE void RecentValueSums(const WindowRow* rows, int32_t len, uint32_t D,
                                         const float* p, float* acc) {
  const DF df;
  const size_t L = hn::Lanes(df);
  size_t i0 = 0;
  for (; i0 + kRecentChunk * L <= D; i0 += kRecentChunk * L) {
    VF o[NG][kRecentChunk];
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) KVS_UNROLL
    for (size_t c = 0; c < kRecentChunk; ++c) o[g][c] = hn::Zero(df);
    for (int32_t j = 0; j < len; ++j) {
      const float vs = WindowRowScale(rows[j], D);
      VF x[kRecentChunk];
      KVS_UNROLL
      for (size_t c = 0; c < kRecentChunk; ++c) x[c] = WindowRowLoad(df, rows[j], i0 + c * L);
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) {
        const VF vp = hn::Set(df, p[size_t(g) * len + j] * vs);
        KVS_UNROLL
        for (size_t c = 0; c < kRecentChunk; ++c) o[g][c] = hn::MulAdd(vp, x[c], o[g][c]);
      }
    }
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) KVS_UNROLL
    for (size_t c = 0; c < kRecentChunk; ++c)
      hn::StoreU(o[g][c], df, acc + size_t(g) * D + i0 + c * L);
  }
  for (; i0 < D; i0 += L) {  // the head dim's last vectors, one at a time
    VF o[NG];
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) o[g] = hn::Zero(df);
    for (int32_t j = 0; j < len; ++j) {
      const float vs = WindowRowScale(rows[j], D);
      const VF x = WindowRowLoad(df, rows[j], i0);
      KVS_UNROLL
      for (int g = 0; g < NG; ++g)
        o[g] = hn::MulAdd(hn::Set(df, p[size_t(g) * len + j] * vs), x, o[g]);
    }
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) hn::StoreU(o[g], df, acc + size_t(g) * D + i0);
  }
}

#if KVS_ATTENTION_KEY_TILES
// Targets with 16 float lanes: the scores of 16 window rows at once. `tile` holds the rows
// converted ([16][D]), `ks` their scales times the softmax scale. Each row's products are summed
// into one vector by the row loop's fused multiply-adds, in its order; the 16 vectors' horizontal
// sums are then taken together, transposed and added lane-wise in the tree of
// _mm512_reduce_add_ps (lanes 8, then 4, 2 and 1 apart), which is SumOfLanes on these targets:
// the row loop's floats, without its 16 reductions.
static HWY_INLINE void RecentScoreTile(const float* tile, const float* ks, const float* q,
                                       uint32_t group, uint32_t D, float* sc, size_t stride) {
  for (uint32_t g = 0; g < group; ++g) {
    const float* qg = q + size_t{g} * D;
    __m512 r[16];
    KVS_UNROLL
    for (int j = 0; j < 16; ++j) r[j] = _mm512_setzero_ps();
    for (uint32_t i = 0; i < D; i += 16) {
      const __m512 qv = _mm512_loadu_ps(qg + i);
      KVS_UNROLL
      for (int j = 0; j < 16; ++j)
        r[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(tile + size_t(j) * D + i), r[j]);
    }
    Transpose16(r);  // r[i]: lane i of every row's sum vector
    __m512 u[8];
    KVS_UNROLL
    for (int i = 0; i < 8; ++i) u[i] = _mm512_add_ps(r[i + 8], r[i]);
    __m512 v[4];
    KVS_UNROLL
    for (int i = 0; i < 4; ++i) v[i] = _mm512_add_ps(u[i + 4], u[i]);
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(v[0], v[2]), _mm512_add_ps(v[1], v[3]));
    _mm512_storeu_ps(sc + g * stride, _mm512_mul_ps(sum, _mm512_loadu_ps(ks)));
  }
}
#endif

// The window's keys k for the `group` query heads of kv head kvh of token t, the queries
// unrotated. The partial goes to `base` like AttendHeads' ([group][D] sums, then m and l), its
// value sums rotated when V is (so that the merge and the output's rotation back treat every
// segment alike).
static void AttendRecent(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, KeyRange k,
                         uint32_t group, bool v_rotated, float* base, std::vector<float>& scores) {
  const RecentWindow& w = *a.kv.recent;
  const uint32_t D = a.kv.head_dim;
  const int32_t len = k.end - k.first;
  const float* q = a.q + (static_cast<size_t>(t) * a.num_heads + size_t{kvh} * group) * D;
  if (scores.size() < size_t{group} * len) scores.resize(size_t{group} * len);
  float* sc = scores.data();
  const DF df;
  const size_t L = hn::Lanes(df);
  const bool vec = D % L == 0;
  thread_local std::vector<float> row_f32;
  thread_local std::vector<WindowRow> value_rows;
  row_f32.resize(D);
  float* row = row_f32.data();
  int32_t j = 0;
#if KVS_ATTENTION_KEY_TILES
  if (vec) {  // 16 lanes
    thread_local std::vector<float> tile;
    tile.resize(size_t{16} * D);
    float ks[16];
    for (; j + 16 <= len; j += 16) {
      for (int32_t r = 0; r < 16; ++r) {
        const WindowRow kr = w.key(t, a.model_layer, kvh, k.first + j + r);
        ks[r] = WindowRowScale(kr, D) * a.scale;
        for (uint32_t i = 0; i < D; i += L)
          hn::StoreU(WindowRowLoad(df, kr, i), df, tile.data() + size_t(r) * D + i);
      }
      RecentScoreTile(tile.data(), ks, q, group, D, sc + j, static_cast<size_t>(len));
    }
  }
#endif
  for (; j < len; ++j) {
    const WindowRow kr = w.key(t, a.model_layer, kvh, k.first + j);
    const float ks = WindowRowScale(kr, D) * a.scale;
    if (vec) {
      for (uint32_t i = 0; i < D; i += L) hn::StoreU(WindowRowLoad(df, kr, i), df, row + i);
    } else {
      window_row_to_f32(kr, D, row);
    }
    for (uint32_t g = 0; g < group; ++g) {
      const float* qg = q + size_t{g} * D;
      float d = 0;
      if (vec) {
        VF acc = hn::Zero(df);
        for (uint32_t i = 0; i < D; i += L)
          acc = hn::MulAdd(hn::LoadU(df, qg + i), hn::LoadU(df, row + i), acc);
        d = hn::GetLane(hn::SumOfLanes(df, acc)) * ks;
      } else {
        for (uint32_t i = 0; i < D; ++i) d += qg[i] * row[i];
        d *= a.scale;
      }
      sc[size_t{g} * len + j] = d;
    }
  }
  float* acc = base;
  float* m = base + size_t{group} * D;
  float* l = m + group;
  for (uint32_t g = 0; g < group; ++g) {
    m[g] = MaxOf(sc + size_t{g} * len, len);
    l[g] = ExpSubAndSum(sc + size_t{g} * len, len, m[g]);
  }
  value_rows.resize(static_cast<size_t>(len));
  for (int32_t j = 0; j < len; ++j) value_rows[j] = w.value(t, a.model_layer, kvh, k.first + j);
  if (vec && group >= 1 && group <= 4) {
    if (group == 1) RecentValueSums<1>(value_rows.data(), len, D, sc, acc);
    if (group == 2) RecentValueSums<2>(value_rows.data(), len, D, sc, acc);
    if (group == 3) RecentValueSums<3>(value_rows.data(), len, D, sc, acc);
    if (group == 4) RecentValueSums<4>(value_rows.data(), len, D, sc, acc);
  } else {
    std::memset(acc, 0, sizeof(float) * group * D);
    for (int32_t j = 0; j < len; ++j) {
      const WindowRow vr = value_rows[j];
      const float vs = WindowRowScale(vr, D);
      if (!vec) window_row_to_f32(vr, D, row);
      for (uint32_t g = 0; g < group; ++g) {
        const float p = sc[size_t{g} * len + j];
        float* o = acc + size_t{g} * D;
        if (vec) {
          const VF vp = hn::Set(df, p * vs);
          for (uint32_t i = 0; i < D; i += L)
            hn::StoreU(hn::MulAdd(vp, WindowRowLoad(df, vr, i), hn::LoadU(df, o + i)), df, o + i);
        } else {
          for (uint32_t i = 0; i < D; ++i) o[i] += p * row[i];
        }
      }
    }
  }
  if (v_rotated)
    for (uint32_t g = 0; g < group; ++g) HadamardRotate(acc + size_t{g} * D, D);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // KVS_KERNELS_ATTENTION_RECENT_WINDOW_INL_H_
