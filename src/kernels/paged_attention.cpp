#include "kernels/paged_attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/kv_vector.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/paged_attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads head_dim elements of one K/V vector as f32 into dst (in registers, a vector at a time).
static void load_vector_f32(KvDtype dtype, const uint8_t* src, uint32_t n, float* dst) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  size_t i = 0;
  switch (dtype) {
    case KvDtype::kF32: std::memcpy(dst, src, n * sizeof(float)); return;
    case KvDtype::kF16: {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      const auto* p = reinterpret_cast<const hwy::float16_t*>(src);
      for (; i + L <= n; i += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + i)), df, dst + i);
      break;
    }
    default: break;
  }
  if (i < n) kv_vector_to_f32(dtype, src, n, dst, static_cast<uint32_t>(i));
}

static float dot(const float* a, const float* b, uint32_t n) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  auto s0 = hn::Zero(df), s1 = hn::Zero(df);
  size_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + L), hn::LoadU(df, b + i + L), s1);
  }
  for (; i + L <= n; i += L) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// acc[0, n) += w * x[0, n)
static void axpy(float w, const float* x, uint32_t n, float* acc) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  const auto vw = hn::Set(df, w);
  size_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::MulAdd(vw, hn::LoadU(df, x + i), hn::LoadU(df, acc + i)), df, acc + i);
  for (; i < n; ++i) acc[i] += w * x[i];
}

static void scale_inplace(float w, uint32_t n, float* x) {
  const hn::ScalableTag<float> df;
  const size_t L = hn::Lanes(df);
  const auto vw = hn::Set(df, w);
  size_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(vw, hn::LoadU(df, x + i)), df, x + i);
  for (; i < n; ++i) x[i] *= w;
}

// One (token, kv head) pair: the `group` query heads that share this KV head.
struct Scratch {
  std::vector<float> scores;  // [group][context]
  std::vector<float> vec;     // [head_dim]
};

static void attend_one(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, Scratch& s) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const uint32_t group = a.num_heads / kv.kv_heads;
  const int32_t n = a.context_len[t];
  const uint32_t* table = a.block_table[t];
  const float* q0 = a.q + (t * a.num_heads + kvh * group) * D;
  float* o0 = a.out + (t * a.num_heads + kvh * group) * D;
  if (s.scores.size() < static_cast<size_t>(group) * n) s.scores.resize(group * n);
  if (s.vec.size() < D) s.vec.resize(D);
  float* vec = s.vec.data();
  // Pass 1: scores = q . k for every visible position, K read once for the whole group.
  const uint32_t bs = kv.block_size;
  for (int32_t base = 0; base < n; base += bs) {
    const uint8_t* kb = kv.k_head(table[base / bs], a.layer, kvh);
    const int32_t end = std::min<int32_t>(n, base + bs);
    for (int32_t j = base; j < end; ++j) {
      load_vector_f32(kv.k_dtype, kb + (j - base) * kv.k_vector_bytes, D, vec);
      for (uint32_t g = 0; g < group; ++g) s.scores[g * n + j] = dot(q0 + g * D, vec, D) * a.scale;
    }
  }
  // Softmax numerators per query head (normalised once, after accumulation).
  float sums[64];
  KVS_CHECK(group <= 64);
  for (uint32_t g = 0; g < group; ++g) {
    float* sc = s.scores.data() + g * n;
    float m = sc[0];
    for (int32_t j = 1; j < n; ++j) m = std::max(m, sc[j]);
    float sum = 0;
    for (int32_t j = 0; j < n; ++j) {
      sc[j] = std::exp(sc[j] - m);
      sum += sc[j];
    }
    sums[g] = sum;
    std::memset(o0 + g * D, 0, D * sizeof(float));
  }
  // Pass 2: out = sum_j p_j v_j, V read once for the whole group.
  for (int32_t base = 0; base < n; base += bs) {
    const uint8_t* vb = kv.v_head(table[base / bs], a.layer, kvh);
    const int32_t end = std::min<int32_t>(n, base + bs);
    for (int32_t j = base; j < end; ++j) {
      load_vector_f32(kv.v_dtype, vb + (j - base) * kv.v_vector_bytes, D, vec);
      for (uint32_t g = 0; g < group; ++g) axpy(s.scores[g * n + j], vec, D, o0 + g * D);
    }
  }
  for (uint32_t g = 0; g < group; ++g) scale_inplace(1.0f / sums[g], D, o0 + g * D);
}

void PagedAttention(const PagedAttentionArgs& a, ThreadPool& pool) {
  const int64_t items = a.num_tokens * a.kv.kv_heads;
  pool.parallel_for(static_cast<size_t>(items), 1, [&](size_t begin, size_t end, int) {
    thread_local Scratch scratch;
    for (size_t i = begin; i < end; ++i)
      attend_one(a, static_cast<int64_t>(i / a.kv.kv_heads),
                 static_cast<uint32_t>(i % a.kv.kv_heads), scratch);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {
HWY_EXPORT(PagedAttention);

void paged_attention(const PagedAttentionArgs& args, ThreadPool& pool) {
  KVS_CHECK(args.kv.kv_heads > 0 && args.num_heads % args.kv.kv_heads == 0);
  HWY_DYNAMIC_DISPATCH(PagedAttention)(args, pool);
}

void paged_attention_reference(const PagedAttentionArgs& a) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const uint32_t group = a.num_heads / kv.kv_heads;
  std::vector<float> k(D), v(D);
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t n = a.context_len[t];
    for (uint32_t h = 0; h < a.num_heads; ++h) {
      const uint32_t kvh = h / group;
      const float* q = a.q + (t * a.num_heads + h) * D;
      std::vector<double> sc(n);
      double m = -INFINITY;
      for (int32_t j = 0; j < n; ++j) {
        const uint32_t blk = a.block_table[t][j / kv.block_size];
        kv_vector_to_f32(kv.k_dtype,
                         kv.k_head(blk, a.layer, kvh) + (j % kv.block_size) * kv.k_vector_bytes, D,
                         k.data(), 0);
        double d = 0;
        for (uint32_t i = 0; i < D; ++i) d += double(q[i]) * k[i];
        sc[j] = d * a.scale;
        m = std::max(m, sc[j]);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - m));
      std::vector<double> acc(D, 0.0);
      for (int32_t j = 0; j < n; ++j) {
        const uint32_t blk = a.block_table[t][j / kv.block_size];
        kv_vector_to_f32(kv.v_dtype,
                         kv.v_head(blk, a.layer, kvh) + (j % kv.block_size) * kv.v_vector_bytes, D,
                         v.data(), 0);
        for (uint32_t i = 0; i < D; ++i) acc[i] += sc[j] / sum * v[i];
      }
      float* o = a.out + (t * a.num_heads + h) * D;
      for (uint32_t i = 0; i < D; ++i) o[i] = static_cast<float>(acc[i]);
    }
  }
}

}  // namespace kvs
#endif
