// Shared-prefix (cascade) attention (kernels/attention_segments.h): segments that several tokens
// read through the same physical blocks are attended once for all of them. Outputs must be
// bit-identical to attending every token on its own, in every format and on every SIMD target,
// and the plan of which segments are shared must match a simple model of the rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/attention_segments.h"
#include "kernels/int8_isa.h"
#include "kernels/kv_write.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"

namespace kvs {
namespace {

constexpr uint32_t kBlock = 16;

// Sequences whose block tables share their first `shared_blocks` physical blocks (a cached
// system prompt), each with its own tail blocks, over one pool whose every slot holds K/V.
struct SharedPrefixBatch {
  uint32_t H = 9, KVH = 3, D = 64;
  std::vector<std::vector<uint32_t>> tables;
  Result<KvBlockStorage> storage = internal_error("not created");

  SharedPrefixBatch(KvDtype k, KvDtype v, uint32_t head_dim, int sequences, uint32_t shared_blocks,
                    uint32_t own_blocks, uint32_t seed)
      : D(head_dim) {
    const uint32_t total = shared_blocks + uint32_t(sequences) * own_blocks;
    storage = KvBlockStorage::create({.num_blocks = total,
                                      .block_size = kBlock,
                                      .layers = 1,
                                      .kv_heads = KVH,
                                      .head_dim = D,
                                      .k_dtype = k,
                                      .v_dtype = v});
    std::mt19937 rng(seed);
    std::vector<uint32_t> ids(total);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);  // scattered, as a long-running pool hands out
    for (int s = 0; s < sequences; ++s) {
      std::vector<uint32_t> t(ids.begin(), ids.begin() + shared_blocks);
      const auto own = ids.begin() + shared_blocks + s * own_blocks;
      t.insert(t.end(), own, own + own_blocks);
      tables.push_back(std::move(t));
    }
    std::normal_distribution<float> nd;
    const int64_t slots = int64_t{total} * kBlock;
    std::vector<float> kk(size_t(slots) * KVH * D), vv(kk.size());
    for (auto& x : kk) x = nd(rng);
    for (auto& x : vv) x = nd(rng);
    std::vector<int64_t> slot(slots);
    std::iota(slot.begin(), slot.end(), 0);
    write_kv(storage->layout(), 0, slots, slot.data(), kk.data(), vv.data());
  }
};

// One token per (sequence, context length) pair; returns every token's output.
std::vector<float> attend(const SharedPrefixBatch& b, const std::vector<int>& seq,
                          const std::vector<int32_t>& ctx, const std::vector<float>& q, bool share,
                          int threads, uint32_t window = 0) {
  const int64_t T = static_cast<int64_t>(seq.size());
  std::vector<const uint32_t*> tabs(T);
  for (int64_t t = 0; t < T; ++t) tabs[t] = b.tables[seq[t]].data();
  std::vector<float> out(q.size(), -7.0f);
  ThreadPool pool(threads);
  const PagedAttentionArgs a{.kv = b.storage->layout(),
                             .num_tokens = T,
                             .num_heads = b.H,
                             .scale = 1.0f / std::sqrt(float(b.D)),
                             .window = window,
                             .q = q.data(),
                             .out = out.data(),
                             .context_len = ctx.data(),
                             .block_table = tabs.data(),
                             .share_segments = share};
  paged_attention(a, pool);
  return out;
}

std::vector<float> random_queries(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> q(n);
  for (auto& x : q) x = nd(rng);
  return q;
}

// How many (token, segment) pairs the plan shares for this batch (so a test cannot pass with
// nothing shared); `causal`: counts only the members of causal groups.
size_t shared_pairs(const SharedPrefixBatch& b, const std::vector<int>& seq,
                    const std::vector<int32_t>& ctx, uint32_t window, bool causal = false) {
  std::vector<const uint32_t*> tabs;
  for (int s : seq) tabs.push_back(b.tables[s].data());
  const PagedAttentionArgs a{.kv = b.storage->layout(),
                             .num_tokens = int64_t(seq.size()),
                             .num_heads = b.H,
                             .window = window,
                             .context_len = ctx.data(),
                             .block_table = tabs.data()};
  std::vector<int64_t> first{0};
  for (size_t t = 0; t < seq.size(); ++t) first.push_back(first.back() + attention_segments(a, t));
  SharedSegmentPlan plan;
  plan_shared_segments(a, first, causal, &plan);
  EXPECT_TRUE(plan.integrity_ok(a, first));
  if (!causal) return plan.tokens.size();
  size_t members = 0;
  for (const auto& g : plan.groups) members += g.causal ? g.count : 0;
  return members;
}

// Shared attention at 1 and 2 threads gives the bits of unshared attention at 1.
void expect_sharing_bit_identical(const SharedPrefixBatch& b, const std::vector<int>& seq,
                                  const std::vector<int32_t>& ctx, const std::vector<float>& q,
                                  uint32_t window = 0) {
  const auto unshared = attend(b, seq, ctx, q, false, 1, window);
  for (int threads : {1, 2}) {
    const auto shared = attend(b, seq, ctx, q, true, threads, window);
    ASSERT_EQ(0, std::memcmp(shared.data(), unshared.data(), shared.size() * sizeof(float)))
        << threads << " threads, window " << window;
  }
}

class SharedSegmentFormatTest
    : public ::testing::TestWithParam<std::tuple<KvDtype, KvDtype, uint32_t>> {};

// Decode tokens of six sequences sharing a 40-block (640-token) prefix, one of them also with a
// prefill chunk's tokens, mixed with a sequence that shares nothing: shared and unshared runs,
// and each token run alone, give the same bits.
TEST_P(SharedSegmentFormatTest, BitIdenticalToUnshared) {
  const auto [kd, vd, D] = GetParam();
  SharedPrefixBatch b(kd, vd, D, 7, 40, 30, 5);
  ASSERT_TRUE(b.storage.is_ok());
  // Sequence 6 shares nothing: its own blocks first, the prefix's ids later, at other positions.
  std::rotate(b.tables[6].begin(), b.tables[6].begin() + 40, b.tables[6].end());
  const std::vector<int> seq = {0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 3};
  const std::vector<int32_t> ctx = {700, 1000, 650, 257, 1100, 513, 900, 701, 702, 703, 512};
  ASSERT_GT(shared_pairs(b, seq, ctx, 0), 10u);
  const auto q = random_queries(seq.size() * b.H * D, 17);
  test::for_each_target([&] {
    expect_sharing_bit_identical(b, seq, ctx, q);
    const auto unshared = attend(b, seq, ctx, q, false, 1);
    // Each token alone (nothing to share with).
    const size_t row = size_t{b.H} * D;
    for (size_t t = 0; t < seq.size(); ++t) {
      const std::vector<float> qt(q.begin() + t * row, q.begin() + (t + 1) * row);
      const auto alone = attend(b, {seq[t]}, {ctx[t]}, qt, true, 1);
      ASSERT_EQ(0, std::memcmp(alone.data(), unshared.data() + t * row, row * sizeof(float)))
          << "token " << t;
    }
  });
}

std::vector<std::tuple<KvDtype, KvDtype, uint32_t>> format_cases() {
  std::vector<std::tuple<KvDtype, KvDtype, uint32_t>> c;
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3,
                    KvDtype::kFp8E4M3Dyn, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kQ8_0,
                    KvDtype::kQ4_0, KvDtype::kInt4Had, KvDtype::kInt3Had, KvDtype::kInt2Had,
                    KvDtype::kInt8Had, KvDtype::kInt2Had64, KvDtype::kInt2Tcq64, KvDtype::kQ8_0Had})
    c.emplace_back(d, d, 64);
  c.emplace_back(KvDtype::kInt8, KvDtype::kF16, 64);
  c.emplace_back(KvDtype::kF16, KvDtype::kF16, 40);  // scalar fallback (head dim not tiled)
  // f16 key tiles (kernels/attention_key_tiles-inl.h) at Gemma 3's head dim and a runtime one.
  c.emplace_back(KvDtype::kF16, KvDtype::kF16, 256);
  c.emplace_back(KvDtype::kF16, KvDtype::kF16, 128);
  c.emplace_back(KvDtype::kF16, KvDtype::kInt4Had, 64);  // key tiles, rotated V
  c.emplace_back(KvDtype::kF16, KvDtype::kInt8, 64);     // key tiles, V with a scale per vector
  c.emplace_back(KvDtype::kInt8, KvDtype::kInt8, 40);    // int8 scalar scores
  // int8_had's integer scores where the widest targets' readers do not fit (rotated: a power of
  // two).
  c.emplace_back(KvDtype::kInt8Had, KvDtype::kInt8Had, 8);
  return c;
}

INSTANTIATE_TEST_SUITE_P(Formats, SharedSegmentFormatTest, ::testing::ValuesIn(format_cases()),
                         [](const auto& info) {
                           return std::string(kv_dtype_name(std::get<0>(info.param))) + "_" +
                                  kv_dtype_name(std::get<1>(info.param)) + "_d" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Prefill chunks: every token of a sequence's chunk reads keys from the same first key to its own
// position, so the kernel groups them causally (f16 keys on targets with key tiles). Chunks that
// start at 0, cross a segment boundary, start past one, or hold one token, of two sequences, mixed
// with decode tokens of others: the same bits as each token on its own, at any thread count.
class CausalGroupTest : public ::testing::TestWithParam<std::tuple<KvDtype, uint32_t>> {};

TEST_P(CausalGroupTest, PrefillChunksBitIdenticalToUnshared) {
  const auto [vd, D] = GetParam();
  SharedPrefixBatch b(KvDtype::kF16, vd, D, 4, 8, 30, 13);
  ASSERT_TRUE(b.storage.is_ok());
  std::vector<int> seq;
  std::vector<int32_t> ctx;
  auto chunk = [&](int s, int32_t from, int32_t to) {
    for (int32_t c = from; c <= to; ++c) seq.push_back(s), ctx.push_back(c);
  };
  chunk(0, 1, 37);                      // a prompt's first chunk
  chunk(1, 240, 300);                   // across the first segment boundary
  chunk(2, 530, 547);                   // past two segments
  chunk(3, 90, 90);                     // one token alone: nothing to group
  seq.push_back(1), ctx.push_back(12);  // a decode token of a sequence with a chunk above
  ASSERT_GT(shared_pairs(b, seq, ctx, 0, /*causal=*/false), 0u);
  ASSERT_GT(shared_pairs(b, seq, ctx, 0, /*causal=*/true), 100u);
  ASSERT_GT(shared_pairs(b, seq, ctx, 40, /*causal=*/true), 100u);
  const auto q = random_queries(seq.size() * b.H * D, 29);
  test::for_each_target([&] {
    expect_sharing_bit_identical(b, seq, ctx, q);
    // A sliding window shorter than the chunks: each token's first key is its own too.
    expect_sharing_bit_identical(b, seq, ctx, q, 40);
  });
}

INSTANTIATE_TEST_SUITE_P(Formats, CausalGroupTest,
                         ::testing::Values(std::make_tuple(KvDtype::kF16, 64u),
                                           std::make_tuple(KvDtype::kF16, 256u),
                                           std::make_tuple(KvDtype::kF16, 128u),
                                           std::make_tuple(KvDtype::kInt4Had, 64u),
                                           std::make_tuple(KvDtype::kInt8, 64u)),
                         [](const auto& info) {
                           return std::string(kv_dtype_name(std::get<0>(info.param))) + "_d" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The plan's causal groups for such a batch: each chunk's tokens, segment by segment, and
// nothing of the lone token or across sequences.
TEST(SharedSegmentPlanTest, CausalGroupsFollowChunks) {
  const SharedPrefixBatch b(KvDtype::kF16, KvDtype::kF16, 64, 3, 8, 30, 4);
  ASSERT_TRUE(b.storage.is_ok());
  // Sequence 0: 20 tokens in one segment; sequence 1: 12 tokens past the first segment (their
  // first segments are exact groups, their second causal); sequence 2: one token.
  std::vector<int> seq;
  std::vector<int32_t> ctx;
  for (int32_t c = 5; c < 25; ++c) seq.push_back(0), ctx.push_back(c);
  for (int32_t c = 300; c < 312; ++c) seq.push_back(1), ctx.push_back(c);
  seq.push_back(2), ctx.push_back(100);
  EXPECT_EQ(32u, shared_pairs(b, seq, ctx, 0, /*causal=*/true));
  EXPECT_EQ(12u, shared_pairs(b, seq, ctx, 0, /*causal=*/false));  // [0, 256) of sequence 1
  EXPECT_EQ(32u, shared_pairs(b, seq, ctx, 10, /*causal=*/true));  // sliding: first keys move
}

// int8 keys are scored by the VNNI kernels or by Highway's int16 path: sharing changes neither.
TEST(SharedSegmentTest, Int8KeysOnEveryIsa) {
  const SharedPrefixBatch b(KvDtype::kInt8, KvDtype::kInt8, 64, 4, 48, 20, 9);
  ASSERT_TRUE(b.storage.is_ok());
  const std::vector<int> seq = {0, 1, 2, 3};
  const std::vector<int32_t> ctx = {800, 900, 1000, 1080};
  const auto q = random_queries(seq.size() * b.H * b.D, 3);
  for (Int8Isa isa : kAllInt8Isas) {
    if (!int8_isa_supported(isa)) continue;
    set_int8_isa_for_test(isa);
    SCOPED_TRACE(int8_isa_name(isa));
    const auto unshared = attend(b, seq, ctx, q, false, 2);
    const auto shared = attend(b, seq, ctx, q, true, 2);
    EXPECT_EQ(0, std::memcmp(shared.data(), unshared.data(), shared.size() * sizeof(float)));
  }
  set_int8_isa_for_test(std::nullopt);
}

// Sliding windows: segments start at each token's first visible key, so tokens share only where
// their windows cut the keys at the same positions.
TEST(SharedSegmentTest, SlidingWindowBitIdentical) {
  const SharedPrefixBatch b(KvDtype::kF16, KvDtype::kF16, 64, 5, 64, 10, 21);
  ASSERT_TRUE(b.storage.is_ok());
  const std::vector<int> seq = {0, 1, 2, 3, 4, 0};
  const std::vector<int32_t> ctx = {1000, 1000, 1010, 900, 1000, 1000};
  const uint32_t window = 600;
  ASSERT_GT(shared_pairs(b, seq, ctx, window), 0u);
  const auto q = random_queries(seq.size() * b.H * b.D, 8);
  const auto unshared = attend(b, seq, ctx, q, false, 1, window);
  const auto shared = attend(b, seq, ctx, q, true, 2, window);
  EXPECT_EQ(0, std::memcmp(shared.data(), unshared.data(), shared.size() * sizeof(float)));
}

// The plan against a simple model: a (token, segment) of a token with 2+ segments is shared iff
// another such token's segment covers the same keys through the same block ids; with causal
// groups, also a non-empty segment left by that rule in a run of 2+ such segments of one table and
// segment index whose first keys are close (kCausalSpread).
TEST(SharedSegmentPlanTest, MatchesSimpleModelOnRandomBatches) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t bs = std::vector<uint32_t>{8, 16, 48, 256}[rng() % 4];
    const int sequences = 1 + int(rng() % 6);
    const uint32_t max_blocks = 4096 / bs + 2;
    // Sequences share a random-length prefix of a common table, then diverge.
    std::vector<uint32_t> common(max_blocks);
    std::iota(common.begin(), common.end(), 0);
    std::vector<std::vector<uint32_t>> tables;
    uint32_t next_id = max_blocks;
    for (int s = 0; s < sequences; ++s) {
      const uint32_t keep = uint32_t(rng() % max_blocks);
      std::vector<uint32_t> t(common.begin(), common.begin() + keep);
      while (t.size() < max_blocks) t.push_back(next_id++);
      tables.push_back(std::move(t));
    }
    const int64_t T = 1 + int64_t(rng() % 40);
    std::vector<int32_t> ctx(T);
    std::vector<const uint32_t*> tabs(T);
    for (int64_t t = 0; t < T; ++t) {
      ctx[t] = int32_t(rng() % 4000);
      if (rng() % 3 == 0) ctx[t] = int32_t(256 * (1 + rng() % 8));  // segment multiples
      tabs[t] = tables[rng() % sequences].data();
    }
    const uint32_t window = (rng() % 3 == 0) ? uint32_t(200 + rng() % 1500) : 0;
    PagedKvLayout kv;
    kv.block_size = bs;
    const PagedAttentionArgs a{.kv = kv,
                               .num_tokens = T,
                               .window = window,
                               .context_len = ctx.data(),
                               .block_table = tabs.data()};
    std::vector<int64_t> first{0};
    for (int64_t t = 0; t < T; ++t) first.push_back(first.back() + attention_segments(a, t));
    const bool causal = trial % 2 == 1;
    SharedSegmentPlan plan;
    plan_shared_segments(a, first, causal, &plan);
    ASSERT_TRUE(plan.integrity_ok(a, first)) << "trial " << trial;
    // The model: segments keyed by (keys, their block ids).
    std::map<std::tuple<int32_t, int32_t, std::vector<uint32_t>>, int> count;
    auto key_of = [&](int64_t t, int32_t s) {
      const KeyRange k = attention_segment_keys(a, t, s);
      std::vector<uint32_t> ids(tabs[t] + k.first / bs, tabs[t] + (k.end - 1) / bs + 1);
      return std::make_tuple(k.first, k.end, ids);
    };
    for (int64_t t = 0; t < T; ++t)
      if (attention_segments(a, t) > 1)
        for (int32_t s = 0; s < attention_segments(a, t); ++s) ++count[key_of(t, s)];
    auto exact = [&](int64_t t, int32_t s) {
      return attention_segments(a, t) > 1 && count[key_of(t, s)] > 1;
    };
    // Causal: the non-empty segments left, by (table, segment index) in token order; a run
    // continues while first keys are within kCausalSpread of its first one; runs of 2+ share.
    std::map<std::pair<const uint32_t*, int32_t>, std::vector<std::pair<int64_t, int32_t>>> left;
    for (int64_t t = 0; t < T; ++t)
      for (int32_t s = 0; s < attention_segments(a, t); ++s) {
        const KeyRange k = attention_segment_keys(a, t, s);
        if (!exact(t, s) && k.end > k.first) left[{tabs[t], s}].push_back({t, k.first});
      }
    std::set<std::pair<int64_t, int32_t>> in_run;  // (token, segment)
    for (const auto& [key, list] : left)
      for (size_t i = 0, e; i < list.size(); i = e) {
        for (e = i + 1; e < list.size() && std::abs(list[e].second - list[i].second) <=
                                               SharedSegmentPlan::kCausalSpread;
             ++e) {
        }
        if (e - i >= 2)
          for (size_t m = i; m < e; ++m) in_run.insert({list[m].first, key.second});
      }
    for (int64_t t = 0; t < T; ++t)
      for (int32_t s = 0; s < attention_segments(a, t); ++s) {
        const bool expect = exact(t, s) || (causal && in_run.count({t, s}) > 0);
        ASSERT_EQ(expect, plan.shared[first[t] + s] != 0)
            << "trial " << trial << " token " << t << " segment " << s;
      }
  }
}

}  // namespace
}  // namespace kvs
