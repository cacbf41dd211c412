// Paged attention vs a contiguous (unpaged) attention over the same K/V, with the sequence's
// blocks shuffled across the pool; and the Highway kernel vs the scalar reference.
#include "kernels/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/int8_key_dots.h"
#include "kernels/kv_vector.h"
#include "kernels/kv_write.h"
#include "kvcache/kv_block_storage.h"
#include "quant/hadamard.h"
#include "quant/kv_channel_groups.h"

namespace kvs {
namespace {

struct Case {
  uint32_t block_size;
  KvDtype k_dtype;
  KvDtype v_dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(kv_dtype_name(info.param.k_dtype)) + "_" + kv_dtype_name(info.param.v_dtype) +
         "_bs" + std::to_string(info.param.block_size);
}

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

// Plain attention over contiguous K/V [n][kv_heads][D] (already rounded to the KV format).
void contiguous_attention(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                          int n, uint32_t H, uint32_t KVH, uint32_t D, float scale, float* out) {
  const uint32_t group = H / KVH;
  for (uint32_t h = 0; h < H; ++h) {
    std::vector<double> s(n);
    double m = -INFINITY;
    for (int j = 0; j < n; ++j) {
      double d = 0;
      for (uint32_t i = 0; i < D; ++i) d += double(q[h * D + i]) * k[(j * KVH + h / group) * D + i];
      s[j] = d * scale;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (uint32_t i = 0; i < D; ++i) {
      double acc = 0;
      for (int j = 0; j < n; ++j) acc += s[j] / sum * v[(j * KVH + h / group) * D + i];
      out[h * D + i] = static_cast<float>(acc);
    }
  }
}

TEST_P(PagedAttentionTest, MatchesContiguousWithShuffledBlocks) {
  const Case c = GetParam();
  const uint32_t H = 6, KVH = 2, D = 64, layers = 2;
  const int seqs = 3;
  const int lens[seqs] = {1, 37, 300};
  std::mt19937 rng(1234 + c.block_size);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  uint32_t blocks_needed = 0;
  for (int len : lens) blocks_needed += (len + c.block_size - 1) / c.block_size;
  const uint32_t num_blocks = blocks_needed + 7;
  auto storage = KvBlockStorage::create({.num_blocks = num_blocks,
                                         .block_size = c.block_size,
                                         .layers = layers,
                                         .kv_heads = KVH,
                                         .head_dim = D,
                                         .k_dtype = c.k_dtype,
                                         .v_dtype = c.v_dtype});
  ASSERT_TRUE(storage.is_ok()) << storage.status().to_string();
  const PagedKvLayout& kv = storage->layout();
  // Physical blocks handed out in a shuffled order: logically adjacent blocks are not adjacent.
  std::vector<uint32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  size_t next = 0;
  std::vector<std::vector<uint32_t>> tables(seqs);
  std::vector<std::vector<float>> ks(seqs), vs(seqs);
  const uint32_t layer = 1;
  std::vector<int64_t> all_slots;
  std::vector<float> all_k, all_v;
  std::vector<std::vector<float>> ks_written(seqs);
  // The contiguous oracle sees the values as the format stores them.
  auto seal = [&](int s) {
    ks_written[s] = ks[s];
    for (auto [arr, dtype] : {std::pair{&ks[s], c.k_dtype}, std::pair{&vs[s], c.v_dtype}}) {
      if (kv_dtype_per_channel(dtype)) {  // keys sealed per group: read them back
        for (int j = 0; j < lens[s]; ++j)
          for (uint32_t h = 0; h < KVH; ++h)
            kv_key_to_f32(kv, tables[s][j / c.block_size], layer, h, j % c.block_size,
                          arr->data() + (size_t(j) * KVH + h) * D);
        continue;
      }
      std::vector<uint8_t> buf(kv_vector_bytes(dtype, D));
      for (size_t off = 0; off < arr->size(); off += D) {
        kv_vector_from_f32(dtype, arr->data() + off, D, buf.data());
        kv_vector_to_f32(dtype, buf.data(), D, arr->data() + off, 0);
      }
    }
  };
  for (int s = 0; s < seqs; ++s) {
    for (int b = 0; b < (lens[s] + int(c.block_size) - 1) / int(c.block_size); ++b)
      tables[s].push_back(physical[next++]);
    ks[s].resize(size_t(lens[s]) * KVH * D);
    vs[s].resize(ks[s].size());
    for (auto& x : ks[s]) x = nd(rng);
    for (auto& x : vs[s]) x = nd(rng);
    std::vector<int64_t> slots(lens[s]);
    for (int j = 0; j < lens[s]; ++j)
      slots[j] = int64_t{tables[s][j / c.block_size]} * c.block_size + j % c.block_size;
    if (!kv_dtype_per_channel(c.k_dtype)) {
      write_kv(kv, layer, lens[s], slots.data(), ks[s].data(), vs[s].data());
    } else {  // one write for all sequences: a query reads its own group from that write
      all_slots.insert(all_slots.end(), slots.begin(), slots.end());
      all_k.insert(all_k.end(), ks[s].begin(), ks[s].end());
      all_v.insert(all_v.end(), vs[s].begin(), vs[s].end());
      if (s + 1 < seqs) continue;
      write_kv(kv, layer, static_cast<int64_t>(all_slots.size()), all_slots.data(), all_k.data(),
               all_v.data());
      for (int u = 0; u < seqs; ++u) seal(u);
      continue;
    }
    seal(s);
  }
  // Queries: for each sequence, its last 4 positions (a prefill chunk) — mixed in one batch.
  std::vector<int32_t> ctx;
  std::vector<const uint32_t*> tab;
  std::vector<int> owner;
  for (int s = 0; s < seqs; ++s)
    for (int j = std::max(0, lens[s] - 4); j < lens[s]; ++j) {
      ctx.push_back(j + 1);
      tab.push_back(tables[s].data());
      owner.push_back(s);
    }
  const int64_t T = static_cast<int64_t>(ctx.size());
  std::vector<float> q(T * H * D), out(T * H * D), ref(T * H * D), expect(T * H * D);
  for (auto& x : q) x = nd(rng);
  ThreadPool pool(3);
  PagedAttentionArgs args{.kv = kv,
                          .layer = layer,
                          .num_tokens = T,
                          .num_heads = H,
                          .scale = 0.125f,
                          .q = q.data(),
                          .out = out.data(),
                          .context_len = ctx.data(),
                          .block_table = tab.data()};
  args.out = ref.data();
  paged_attention_reference(args);
  args.out = out.data();
  // ... and the queries as the format scores them: int8 K against int8 queries, int8_had K
  // against the rotated query in int8 (rotated back here, H being its own inverse).
  std::vector<float> q_seen = q;
  if (kv_dtype_int8_keys(c.k_dtype)) {
    const bool rotated = c.k_dtype == KvDtype::kInt8Had;
    std::vector<int8_t> q8(D);
    for (size_t off = 0; off < q_seen.size(); off += D) {
      if (rotated) hadamard_inplace(q_seen.data() + off, D);
      int32_t sum = 0;
      const float d = quantize_query_int8(q_seen.data() + off, D, q8.data(), &sum);
      for (uint32_t i = 0; i < D; ++i) q_seen[off + i] = d * q8[i];
      if (rotated) hadamard_inplace(q_seen.data() + off, D);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> keys = ks[owner[t]];
    const int G = static_cast<int>(kv_channel_group_tokens(c.k_dtype));
    if (G != 0)  // the query's own group: the keys in f16
      for (int j = (ctx[t] - 1) / G * G; j < ctx[t]; ++j)
        for (uint32_t i = 0; i < KVH * D; ++i)
          keys[j * KVH * D + i] = f16_to_f32(f32_to_f16(ks_written[owner[t]][j * KVH * D + i]));
    contiguous_attention(q_seen.data() + t * H * D, keys, vs[owner[t]], ctx[t], H, KVH, D, 0.125f,
                         expect.data() + t * H * D);
  }
  // 4-bit and int2mix per-channel keys are scored against the group's q x step rounded to int8
  // (kernels/attention_channel_keys-inl.h), which the reference models and this oracle does not:
  // the reference is held to the oracle within that rounding's effect, the kernel to the
  // reference. That bound is about 2x the largest difference measured here (0.011, int4_chan); the
  // 4-bit keys themselves move these outputs by up to 0.2 from f32 attention (QuantizedVsF32Test).
  const bool int_channels = kv_dtype_per_channel(c.k_dtype) &&
                            int8_key_dots::channel_keys_in_int8(channel_bits(c.k_dtype));
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(ref[i], expect[i], int_channels ? 2e-2 : 1e-5)
        << "reference vs contiguous at " << i;
  const std::vector<float>& oracle = int_channels ? ref : expect;
  test::for_each_target([&] {
    std::fill(out.begin(), out.end(), 0.0f);
    paged_attention(args, pool);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], oracle[i], 2e-5 * (1 + std::abs(oracle[i])))
          << "kernel vs " << (int_channels ? "reference" : "contiguous") << " at " << i;
  });
}

constexpr KvDtype kAllFormats[] = {KvDtype::kF32,       KvDtype::kF16,     KvDtype::kBF16,
                                   KvDtype::kFp8E4M3,   KvDtype::kFp8E5M2, KvDtype::kFp8E4M3Dyn,
                                   KvDtype::kInt8,      KvDtype::kInt4,    KvDtype::kQ8_0,
                                   KvDtype::kQ4_0,      KvDtype::kInt4Had, KvDtype::kInt3Had,
                                   KvDtype::kInt2Had,   KvDtype::kInt8Had, KvDtype::kInt2Had64,
                                   KvDtype::kInt2Tcq64, KvDtype::kQ8_0Had};

std::vector<Case> all_cases() {
  std::vector<Case> cases = {{1, KvDtype::kF32, KvDtype::kF32},
                             {256, KvDtype::kF32, KvDtype::kF32},
                             {1, KvDtype::kF16, KvDtype::kF16},
                             {256, KvDtype::kF16, KvDtype::kF16},
                             {7, KvDtype::kBF16, KvDtype::kBF16}};
  // Every format as K and V at the engine's block size, a few odd block sizes, and every
  // K/V combination of the formats people mix (a precise K with a coarse V, and back).
  for (KvDtype d : kAllFormats) cases.push_back({16, d, d});
  for (KvDtype d : {KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kQ4_0,
                    KvDtype::kInt4Had, KvDtype::kInt2Had, KvDtype::kInt8Had, KvDtype::kInt2Had64,
                    KvDtype::kInt2Tcq64, KvDtype::kQ8_0Had})
    cases.push_back({7, d, d});
  for (KvDtype k : kAllFormats)
    for (KvDtype v : kAllFormats)
      if (k != v) cases.push_back({16, k, v});
  // Per-channel keys (keys only) with the V formats they are paired with, at block sizes of one
  // and several groups (16 or 64 tokens).
  for (KvDtype k :
       {KvDtype::kInt4Chan, KvDtype::kInt3Chan, KvDtype::kInt2Chan, KvDtype::kInt4Chan64,
        KvDtype::kInt3Chan64, KvDtype::kInt2Chan64, KvDtype::kInt2MixChan64})
    for (KvDtype v :
         {KvDtype::kF16, KvDtype::kInt8, KvDtype::kInt4Had, KvDtype::kQ4_0, KvDtype::kInt3Had,
          KvDtype::kInt2Had, KvDtype::kInt8Had, KvDtype::kInt2Had64, KvDtype::kInt2Tcq64}) {
      const uint32_t g = kv_channel_group_tokens(k);
      cases.push_back({g, k, v});
      cases.push_back({3 * g, k, v});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(BlockSizesAndFormats, PagedAttentionTest, ::testing::ValuesIn(all_cases()),
                         case_name);

// Quantized attention vs f32 attention on the same (unquantized) data: the format's error as
// the model sees it. Bounds are on max |out - out_f32| for N(0, 1) q, K and V, scale 1/8
// (scores of unit spread), 1 to 300 keys; each is about 2x the error measured on this data.
// The worst case is the 1-key context, where the output is V itself: V's element error.
struct FormatBound {
  KvDtype k_dtype;
  KvDtype v_dtype;
  double max_abs_err;
};

class QuantizedVsF32Test : public ::testing::TestWithParam<FormatBound> {};

TEST_P(QuantizedVsF32Test, WithinFormatBound) {
  const FormatBound fb = GetParam();
  const uint32_t H = 6, KVH = 2, D = 64, bs = 16;
  const int n = 300;
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const uint32_t nblocks = (n + bs - 1) / bs;
  auto storage = KvBlockStorage::create({.num_blocks = nblocks,
                                         .block_size = bs,
                                         .layers = 1,
                                         .kv_heads = KVH,
                                         .head_dim = D,
                                         .k_dtype = fb.k_dtype,
                                         .v_dtype = fb.v_dtype});
  ASSERT_TRUE(storage.is_ok());
  std::vector<uint32_t> table(nblocks);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> k(size_t(n) * KVH * D), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<int64_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  write_kv(storage->layout(), 0, n, slots.data(), k.data(), v.data());
  // Decode-like queries at a few context lengths.
  const int ctxs[] = {1, 17, 160, 300};
  const int T = 4;
  std::vector<int32_t> ctx(ctxs, ctxs + T);
  std::vector<const uint32_t*> tab(T, table.data());
  std::vector<float> q(T * H * D), out(q.size()), expect(q.size());
  for (auto& x : q) x = nd(rng);
  ThreadPool pool(2);
  paged_attention({.kv = storage->layout(),
                   .layer = 0,
                   .num_tokens = T,
                   .num_heads = H,
                   .scale = 0.125f,
                   .q = q.data(),
                   .out = out.data(),
                   .context_len = ctx.data(),
                   .block_table = tab.data()},
                  pool);
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    contiguous_attention(q.data() + t * H * D, k, v, ctx[t], H, KVH, D, 0.125f,
                         expect.data() + t * H * D);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i]));
    worst = std::max(worst, std::fabs(double(out[i]) - expect[i]));
  }
  EXPECT_LE(worst, fb.max_abs_err);
  std::printf("[ %s/%s ] max |attention - f32 attention| = %.3g (bound %.3g)\n",
              kv_dtype_name(fb.k_dtype), kv_dtype_name(fb.v_dtype), worst, fb.max_abs_err);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizedVsF32Test,
    ::testing::Values(FormatBound{KvDtype::kF32, KvDtype::kF32, 1e-5},
                      FormatBound{KvDtype::kF16, KvDtype::kF16, 2e-3},
                      FormatBound{KvDtype::kBF16, KvDtype::kBF16, 1.5e-2},
                      FormatBound{KvDtype::kFp8E4M3, KvDtype::kFp8E4M3, 0.25},
                      FormatBound{KvDtype::kFp8E5M2, KvDtype::kFp8E5M2, 0.4},
                      FormatBound{KvDtype::kFp8E4M3Dyn, KvDtype::kFp8E4M3Dyn, 0.25},
                      FormatBound{KvDtype::kInt8, KvDtype::kInt8, 0.03},
                      FormatBound{KvDtype::kInt8Had, KvDtype::kInt8Had, 0.03},
                      FormatBound{KvDtype::kQ8_0Had, KvDtype::kQ8_0Had, 0.03},
                      FormatBound{KvDtype::kQ8_0, KvDtype::kQ8_0, 0.03},
                      FormatBound{KvDtype::kInt4, KvDtype::kInt4, 0.4},
                      FormatBound{KvDtype::kQ4_0, KvDtype::kQ4_0, 0.4},
                      FormatBound{KvDtype::kInt4Had, KvDtype::kInt4Had, 0.4},
                      FormatBound{KvDtype::kInt3Had, KvDtype::kInt3Had, 0.8},
                      FormatBound{KvDtype::kInt2Had, KvDtype::kInt2Had, 1.6},
                      FormatBound{KvDtype::kInt2Had64, KvDtype::kInt2Had64, 1.6},
                      FormatBound{KvDtype::kInt2Tcq64, KvDtype::kInt2Tcq64, 1.6},
                      FormatBound{KvDtype::kInt8, KvDtype::kInt4, 0.4},
                      FormatBound{KvDtype::kInt8, KvDtype::kInt4Had, 0.4},
                      FormatBound{KvDtype::kFp8E4M3, KvDtype::kInt8, 0.05}),
    [](const ::testing::TestParamInfo<FormatBound>& info) {
      return std::string(kv_dtype_name(info.param.k_dtype)) + "_" +
             kv_dtype_name(info.param.v_dtype);
    });

// Kernel vs scalar reference on the same quantized data, on shapes that take the other code
// paths: decode of one sequence with a long context (split into key ranges that are merged),
// query-head groups larger than one register batch (5, 8), head dims 128 and 40 (40 is not a
// multiple of the SIMD width: the scalar-decode fallback), and Gemma 3's 4 heads over one KV head
// of 256 (f16 keys have a head-dim-256 instantiation, as every format has one for 64).
struct Shape {
  uint32_t heads, kv_heads, head_dim;
  int tokens;  // decode tokens, each with its own long context
  int context;
};

class PagedAttentionShapesTest : public ::testing::TestWithParam<std::tuple<KvDtype, Shape>> {};

// Every format with every shape it can hold: the formats of 32-element groups need a head dim
// that is a multiple of 32, so head dim 40 runs in the other formats only (not instantiated,
// rather than reported as skipped), and the rotated ones a power of two. Head dim 8 is narrower
// than the widest targets' vectors: their scalar fallback, where int8_had's keys are still scored
// in integers against the rotated query and its values decoded to the model's space.
std::vector<std::tuple<KvDtype, Shape>> format_shape_cases() {
  std::vector<std::tuple<KvDtype, Shape>> cases;
  for (KvDtype d : kAllFormats)
    for (Shape sh : {Shape{10, 2, 128, 1, 3001}, Shape{8, 1, 64, 2, 1500}, Shape{9, 3, 64, 1, 4100},
                     Shape{4, 4, 40, 3, 300}, Shape{4, 1, 256, 2, 700}, Shape{4, 2, 8, 2, 200}})
      if ((kv_dtype_info(d).group_elems == 0 || sh.head_dim % 32 == 0) &&
          (!kv_dtype_rotated(d) || (sh.head_dim & (sh.head_dim - 1)) == 0))
        cases.emplace_back(d, sh);
  return cases;
}

TEST_P(PagedAttentionShapesTest, MatchesReference) {
  const auto [dtype, sh] = GetParam();
  const uint32_t bs = 16;
  const uint32_t nblocks = (sh.context + bs - 1) / bs;
  auto storage = KvBlockStorage::create({.num_blocks = nblocks,
                                         .block_size = bs,
                                         .layers = 1,
                                         .kv_heads = sh.kv_heads,
                                         .head_dim = sh.head_dim,
                                         .k_dtype = dtype,
                                         .v_dtype = dtype});
  ASSERT_TRUE(storage.is_ok());
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint32_t> table(nblocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> k(size_t(sh.context) * sh.kv_heads * sh.head_dim), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng) * 3.0f;
  std::vector<int64_t> slots(sh.context);
  for (int j = 0; j < sh.context; ++j) slots[j] = int64_t{table[j / bs]} * bs + j % bs;
  write_kv(storage->layout(), 0, sh.context, slots.data(), k.data(), v.data());
  std::vector<int32_t> ctx(sh.tokens);
  for (int t = 0; t < sh.tokens; ++t) ctx[t] = sh.context - 37 * t;
  std::vector<const uint32_t*> tab(sh.tokens, table.data());
  const size_t qn = size_t(sh.tokens) * sh.heads * sh.head_dim;
  std::vector<float> q(qn), out(qn), ref(qn);
  for (auto& x : q) x = nd(rng);
  ThreadPool pool(4);
  PagedAttentionArgs args{.kv = storage->layout(),
                          .layer = 0,
                          .num_tokens = sh.tokens,
                          .num_heads = sh.heads,
                          .scale = 0.3f / std::sqrt(float(sh.head_dim)) * 8,
                          .q = q.data(),
                          .out = out.data(),
                          .context_len = ctx.data(),
                          .block_table = tab.data()};
  args.out = ref.data();
  paged_attention_reference(args);
  args.out = out.data();
  test::for_each_target([&] {
    std::fill(out.begin(), out.end(), 0.0f);
    paged_attention(args, pool);
    for (size_t i = 0; i < qn; ++i)
      ASSERT_NEAR(out[i], ref[i], 2e-5 * (1 + std::abs(ref[i])))
          << kv_dtype_name(dtype) << " " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(FormatsAndShapes, PagedAttentionShapesTest,
                         ::testing::ValuesIn(format_shape_cases()),
                         [](const ::testing::TestParamInfo<std::tuple<KvDtype, Shape>>& info) {
                           const Shape& sh = std::get<1>(info.param);
                           return std::string(kv_dtype_name(std::get<0>(info.param))) + "_h" +
                                  std::to_string(sh.heads) + "_kv" + std::to_string(sh.kv_heads) +
                                  "_d" + std::to_string(sh.head_dim) + "_t" +
                                  std::to_string(sh.tokens);
                         });

// A block carries its scales: after a copy-on-write copy of its tokens, or a swap out to host
// memory and back into another block, attention reads exactly the same values in every format.
class BlockSelfContainedTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(BlockSelfContainedTest, CopyAndSwapKeepAttention) {
  const KvDtype d = GetParam();
  const uint32_t H = 4, KVH = 2, D = 64, bs = 16, n = 11;
  auto st = KvBlockStorage::create({.num_blocks = 3,
                                    .block_size = bs,
                                    .layers = 2,
                                    .kv_heads = KVH,
                                    .head_dim = D,
                                    .k_dtype = d,
                                    .v_dtype = d});
  ASSERT_TRUE(st.is_ok());
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> k(n * KVH * D), v(k.size()), q(H * D);
  for (auto* a : {&k, &v, &q})
    for (auto& x : *a) x = nd(rng);
  std::vector<int64_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);  // block 0
  for (uint32_t layer = 0; layer < 2; ++layer)
    write_kv(st->layout(), layer, n, slots.data(), k.data(), v.data());
  st->copy_tokens(0, 1, n);  // copy-on-write
  auto host = KvBlockStorage::create({.num_blocks = 1,
                                      .block_size = bs,
                                      .layers = 2,
                                      .kv_heads = KVH,
                                      .head_dim = D,
                                      .k_dtype = d,
                                      .v_dtype = d});
  ASSERT_TRUE(host.is_ok());
  st->copy_block_to(0, *host, 0);  // swap out ...
  host->copy_block_to(0, *st, 2);  // ... and back in elsewhere
  ThreadPool pool(2);
  std::vector<std::vector<float>> outs;
  for (uint32_t b = 0; b < 3; ++b) {
    const uint32_t table[1] = {b};
    const uint32_t* tab = table;
    const int32_t ctx = n;
    std::vector<float> out(H * D);
    paged_attention({.kv = st->layout(),
                     .layer = 1,
                     .num_tokens = 1,
                     .num_heads = H,
                     .scale = 0.125f,
                     .q = q.data(),
                     .out = out.data(),
                     .context_len = &ctx,
                     .block_table = &tab},
                    pool);
    outs.push_back(out);
  }
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, BlockSelfContainedTest, ::testing::ValuesIn(kAllFormats),
                         [](const ::testing::TestParamInfo<KvDtype>& info) {
                           return std::string(kv_dtype_name(info.param));
                         });

}  // namespace
}  // namespace kvs
