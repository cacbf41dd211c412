// Paged attention with the recent-token window (quant/recent_window.h): the kernel reads a
// token's newest positions from the window's f16 rows (this step's and the rings') and the rest
// from the pool, and matches the scalar reference doing the same, in every format (rotated ones,
// int8 queries and per-channel keys included), with shared prefix segments, a sliding window, a
// token below its floor and a token without a slot; and with the attention sink
// (quant/attention_sink.h), which reads position 0 from its rows too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "kernel_test_util.h"
#include "kernels/attention_segments.h"
#include "kernels/kv_write.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

constexpr uint32_t kBs = 16, kKvHeads = 2, kHeads = 6, kDim = 64, kWindow = 32;
constexpr uint32_t kLayer = 1;  // the window's layer (of 2): the rings are indexed by it
constexpr int32_t kContext = 700;

struct Step {
  std::vector<int32_t> pos, slot, floor;
  void add(int32_t first, int32_t n, int32_t s, int32_t f) {
    for (int32_t i = 0; i < n; ++i) {
      pos.push_back(first + i);
      slot.push_back(s);
      floor.push_back(f);
    }
  }
};

std::vector<float> normal(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

void run_step(RecentWindow& w, const Step& s, std::mt19937& rng) {
  const size_t rows = s.pos.size() * kKvHeads * kDim;
  w.begin_step(int64_t(s.pos.size()), s.pos.data(), s.slot.data(), s.floor.data());
  const std::vector<float> k = normal(rows, 1.0f, rng), v = normal(rows, 3.0f, rng);
  w.store(k.data(), v.data());
}

class RecentWindowAttentionTest
    : public ::testing::TestWithParam<std::tuple<KvDtype, KvDtype, uint32_t>> {};

// A pool of kContext tokens of random K and V in blocks of shuffled ids (`table`).
struct Pool {
  KvBlockStorage storage;
  std::vector<uint32_t> table;
};
Pool make_pool(KvDtype kd, KvDtype vd, std::mt19937& rng) {
  const uint32_t nblocks = (kContext + kBs - 1) / kBs;
  auto storage = KvBlockStorage::create({.num_blocks = nblocks,
                                         .block_size = kBs,
                                         .layers = 1,
                                         .kv_heads = kKvHeads,
                                         .head_dim = kDim,
                                         .k_dtype = kd,
                                         .v_dtype = vd});
  KVS_CHECK(storage.is_ok());
  std::vector<uint32_t> table(nblocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const std::vector<float> k = normal(size_t(kContext) * kKvHeads * kDim, 1.0f, rng);
  const std::vector<float> v = normal(k.size(), 3.0f, rng);
  std::vector<int64_t> slots(kContext);
  for (int j = 0; j < kContext; ++j) slots[j] = int64_t{table[j / kBs]} * kBs + j % kBs;
  write_kv(storage->layout(), 0, kContext, slots.data(), k.data(), v.data());
  return {std::move(*storage), std::move(table)};
}

void check_against_reference(KvDtype kd, KvDtype vd, uint32_t sliding, bool sink,
                             KvDtype rows = KvDtype::kF16) {
  std::mt19937 rng(11);
  Pool p = make_pool(kd, vd, rng);
  KvBlockStorage* storage = &p.storage;
  const std::vector<uint32_t>& table = p.table;

  // Sequences (all reading the same pool blocks): A, slot 0, a chunk of 8 at 692 (floor 640);
  // B, slot 1, decoding at 400 (floor 0); C, slot 2, decoding at 300 below its floor 320; D, no
  // slot, decoding at 500.
  RecentWindow w = RecentWindow::create(3, kWindow, 2, kKvHeads, kDim, sink, rows).value();
  if (sink) {  // position 0 of A, B and C, computed by an earlier step (rows unlike the pool's)
    Step first;
    for (int32_t s = 0; s < 3; ++s) first.add(0, 1, s, 0);
    run_step(w, first, rng);
    w.commit(kLayer);
  }
  Step fill;  // the rows before each chunk, committed by an earlier step
  fill.add(692 - 48, 48, 0, 640);
  fill.add(400 - 48, 48, 1, 0);
  fill.add(300 - 48, 48, 2, 320);
  run_step(w, fill, rng);
  w.commit(kLayer);
  Step now;
  now.add(692, 8, 0, 640);
  now.add(400, 1, 1, 0);
  now.add(300, 1, 2, 320);
  now.add(500, 1, -1, 0);
  run_step(w, now, rng);
  const int64_t T = int64_t(now.pos.size());
  std::vector<int32_t> ctx(T);
  for (int64_t t = 0; t < T; ++t) ctx[t] = now.pos[t] + 1;
  std::vector<const uint32_t*> tabs(T, table.data());
  const size_t qn = size_t(T) * kHeads * kDim;
  const std::vector<float> q = normal(qn, 1.0f, rng);
  std::vector<float> out(qn), ref(qn), plain(qn);
  PagedKvLayout kv = storage->layout();
  kv.recent = &w;
  PagedAttentionArgs args{.kv = kv,
                          .layer = 0,
                          .model_layer = kLayer,
                          .num_tokens = T,
                          .num_heads = kHeads,
                          .scale = 2.4f / std::sqrt(float(kDim)),
                          .window = sliding,
                          .q = q.data(),
                          .out = ref.data(),
                          .context_len = ctx.data(),
                          .block_table = tabs.data()};
  // The cut: A's and B's last segment is the window, C and D have none.
  // A: its group 688 - 32 (above the floor); B: 400 - 32; a sliding window may start later.
  const auto after_sliding = [&](int32_t start, int32_t n) {
    return sliding ? std::max(start, n - int32_t(sliding)) : start;
  };
  EXPECT_EQ(attention_recent_key(args, 0), after_sliding(656, 693));
  EXPECT_EQ(attention_recent_key(args, 7), after_sliding(656, 700));
  EXPECT_EQ(attention_recent_key(args, 8), after_sliding(368, 401));
  EXPECT_EQ(attention_recent_key(args, 9), 301);
  EXPECT_EQ(attention_recent_key(args, 10), 501);
  const KeyRange last = attention_segment_keys(args, 0, attention_segments(args, 0) - 1);
  EXPECT_TRUE(last.recent);
  EXPECT_EQ(last.end, 693);
  // The sink: A, B and C (below its floor too) read position 0 from it, D (no slot) and every
  // token of a sliding window that has moved past position 0 do not.
  for (int64_t t = 0; t < T; ++t) {
    const bool reads = sink && sliding == 0 && t <= 9;
    EXPECT_EQ(attention_reads_sink(args, t), reads) << "token " << t;
    const KeyRange k0 = attention_segment_keys(args, t, 0);
    if (reads) {
      EXPECT_TRUE(k0.recent && k0.first == 0 && k0.end == 1) << "token " << t;
      EXPECT_EQ(attention_segment_keys(args, t, 1).first, 1) << "token " << t;
    }
  }
  paged_attention_reference(args);
  ThreadPool pool(3);
  test::for_each_target([&] {
    for (bool share : {true, false}) {
      args.share_segments = share;
      args.out = out.data();
      std::fill(out.begin(), out.end(), 0.0f);
      paged_attention(args, pool);
      for (size_t i = 0; i < qn; ++i)
        ASSERT_NEAR(out[i], ref[i], 3e-5 * (1 + std::abs(ref[i])))
            << kv_dtype_name(kd) << "/" << kv_dtype_name(vd) << " token " << i / (kHeads * kDim)
            << " share " << share << " sink " << sink;
    }
  });
  // The window is read: without it, the tokens that have one get other outputs (their rows
  // differ from the pool's), and the ones without do not.
  args.out = out.data();
  paged_attention(args, pool);  // on this CPU's best target, as the run below
  args.kv.recent = nullptr;
  args.out = plain.data();
  paged_attention(args, pool);
  for (int64_t t = 0; t < T; ++t) {
    double diff = 0;
    for (size_t i = size_t(t) * kHeads * kDim; i < size_t(t + 1) * kHeads * kDim; ++i)
      diff = std::max<double>(diff, std::abs(plain[i] - out[i]));
    if (t <= 8 || (t == 9 && sink && sliding == 0))
      EXPECT_GT(diff, 1e-3) << "token " << t;
    else
      EXPECT_EQ(diff, 0.0) << "token " << t;
  }
}

TEST_P(RecentWindowAttentionTest, MatchesReference) {
  const auto [kd, vd, sliding] = GetParam();
  check_against_reference(kd, vd, sliding, /*sink=*/false);
}

TEST_P(RecentWindowAttentionTest, MatchesReferenceWithTheSink) {
  const auto [kd, vd, sliding] = GetParam();
  check_against_reference(kd, vd, sliding, /*sink=*/true);
}

// --kv-recent-window-dtype int8: the window's rows in int8 (the sink's stay f16).
TEST_P(RecentWindowAttentionTest, MatchesReferenceWithInt8Rows) {
  const auto [kd, vd, sliding] = GetParam();
  check_against_reference(kd, vd, sliding, /*sink=*/false, KvDtype::kInt8);
  check_against_reference(kd, vd, sliding, /*sink=*/true, KvDtype::kInt8);
}

// A window longer than a segment (400 rows, as the 2-bit recipe's) is cut into segments of
// kAttentionSegment keys like the pool, so that threads share it: a token decoding at 600 with
// the sink reads position 0, the pool's [1, 192) and the window's [192, 448) and [448, 601), and
// matches the reference on every target.
TEST(RecentWindowLongTest, AWindowLongerThanASegmentIsCutAndMatchesReference) {
  constexpr uint32_t kLong = 400;
  constexpr int32_t kPos = 600;
  for (const KvDtype rows : {KvDtype::kF16, KvDtype::kInt8}) {
    std::mt19937 rng(5);
    Pool p = make_pool(KvDtype::kInt2Chan, KvDtype::kInt2Had, rng);
    RecentWindow w = RecentWindow::create(1, kLong, 2, kKvHeads, kDim, true, rows).value();
    Step first;  // position 0, then the rows the window reaches back to
    first.add(0, 1, 0, 0);
    run_step(w, first, rng);
    w.commit(kLayer);
    Step fill;
    fill.add(1, kPos - 1, 0, 0);
    run_step(w, fill, rng);
    w.commit(kLayer);
    Step now;
    now.add(kPos, 1, 0, 0);
    run_step(w, now, rng);
    const int32_t ctx = kPos + 1;
    const uint32_t* tab = p.table.data();
    const std::vector<float> q = normal(size_t(kHeads) * kDim, 1.0f, rng);
    std::vector<float> out(q.size()), ref(q.size());
    PagedKvLayout kv = p.storage.layout();
    kv.recent = &w;
    PagedAttentionArgs args{.kv = kv,
                            .layer = 0,
                            .model_layer = kLayer,
                            .num_tokens = 1,
                            .num_heads = kHeads,
                            .scale = 2.4f / std::sqrt(float(kDim)),
                            .q = q.data(),
                            .out = ref.data(),
                            .context_len = &ctx,
                            .block_table = &tab};
    ASSERT_EQ(attention_recent_key(args, 0), 192);  // group 592 - 400
    ASSERT_TRUE(attention_reads_sink(args, 0));
    ASSERT_EQ(attention_segments(args, 0), 4);
    const KeyRange expect[] = {{0, 1, true}, {1, 192, false}, {192, 448, true}, {448, 601, true}};
    for (int32_t i = 0; i < 4; ++i) {
      const KeyRange r = attention_segment_keys(args, 0, i);
      EXPECT_EQ(r.first, expect[i].first) << "segment " << i;
      EXPECT_EQ(r.end, expect[i].end) << "segment " << i;
      EXPECT_EQ(r.recent, expect[i].recent) << "segment " << i;
    }
    paged_attention_reference(args);
    ThreadPool pool(3);
    test::for_each_target([&] {
      args.out = out.data();
      std::fill(out.begin(), out.end(), 0.0f);
      paged_attention(args, pool);
      for (size_t i = 0; i < q.size(); ++i)
        ASSERT_NEAR(out[i], ref[i], 3e-5 * (1 + std::abs(ref[i])))
            << kv_dtype_name(rows) << " element " << i;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, RecentWindowAttentionTest,
    ::testing::Values(std::tuple{KvDtype::kF16, KvDtype::kF16, 0u},
                      std::tuple{KvDtype::kInt8, KvDtype::kInt8, 0u},
                      std::tuple{KvDtype::kInt8Had, KvDtype::kInt8Had, 0u},
                      std::tuple{KvDtype::kQ8_0Had, KvDtype::kQ8_0Had, 0u},
                      std::tuple{KvDtype::kInt4Had, KvDtype::kInt4Had, 0u},
                      std::tuple{KvDtype::kInt4Had, KvDtype::kF16, 0u},
                      std::tuple{KvDtype::kF16, KvDtype::kInt2Had, 0u},
                      std::tuple{KvDtype::kInt4Chan, KvDtype::kInt4Had, 0u},
                      std::tuple{KvDtype::kInt2Chan, KvDtype::kInt2Had, 0u},
                      std::tuple{KvDtype::kInt3Chan, KvDtype::kInt3Had, 0u},
                      std::tuple{KvDtype::kInt2Chan, KvDtype::kInt2Had, 20u},
                      std::tuple{KvDtype::kF16, KvDtype::kF16, 100u}),
    [](const ::testing::TestParamInfo<std::tuple<KvDtype, KvDtype, uint32_t>>& info) {
      return std::string(kv_dtype_name(std::get<0>(info.param))) + "_" +
             kv_dtype_name(std::get<1>(info.param)) + "_sliding" +
             std::to_string(std::get<2>(info.param));
    });

}  // namespace
}  // namespace kvs

namespace kvs {
namespace {

// A window holding the f16 pool's own rows gives the pool's output (to the sums' rounding): the
// window's rows stand for the same positions. With the sink and a floor inside the chunk, every
// token reads position 0 from this step's rows, those above the floor the window from there.
class SameRowsTest : public ::testing::TestWithParam<bool> {};

TEST_P(SameRowsTest, SameRowsAsAnF16PoolSameOutput) {
  const bool sink = GetParam();
  const int32_t n = 130;
  const uint32_t nblocks = (n + kBs - 1) / kBs;
  auto storage = KvBlockStorage::create({.num_blocks = nblocks,
                                         .block_size = kBs,
                                         .layers = 1,
                                         .kv_heads = kKvHeads,
                                         .head_dim = kDim,
                                         .k_dtype = KvDtype::kF16,
                                         .v_dtype = KvDtype::kF16});
  ASSERT_TRUE(storage.is_ok());
  std::mt19937 rng(5);
  const std::vector<float> k = normal(size_t(n) * kKvHeads * kDim, 1.0f, rng);
  const std::vector<float> v = normal(k.size(), 3.0f, rng);
  std::vector<uint32_t> table(nblocks);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int64_t> slots(n);
  for (int j = 0; j < n; ++j) slots[j] = j;
  write_kv(storage->layout(), 0, n, slots.data(), k.data(), v.data());
  RecentWindow w = RecentWindow::create(1, 256, 1, kKvHeads, kDim, sink).value();
  std::vector<int32_t> pos(n), slot(n, 0), floor(n, sink ? 112 : 0), ctx(n);
  std::iota(pos.begin(), pos.end(), 0);
  for (int j = 0; j < n; ++j) ctx[j] = j + 1;
  w.begin_step(n, pos.data(), slot.data(), floor.data());
  w.store(k.data(), v.data());
  std::vector<const uint32_t*> tabs(n, table.data());
  const size_t qn = size_t(n) * kHeads * kDim;
  const std::vector<float> q = normal(qn, 1.0f, rng);
  std::vector<float> with(qn), without(qn);
  PagedKvLayout kv = storage->layout();
  kv.recent = &w;
  PagedAttentionArgs args{.kv = kv,
                          .num_tokens = n,
                          .num_heads = kHeads,
                          .scale = 2.4f / std::sqrt(float(kDim)),
                          .q = q.data(),
                          .out = with.data(),
                          .context_len = ctx.data(),
                          .block_table = tabs.data()};
  if (sink) {
    EXPECT_TRUE(attention_reads_sink(args, 5));
    EXPECT_TRUE(attention_reads_sink(args, 111));
    EXPECT_TRUE(attention_reads_sink(args, 129));  // its window starts at the floor
  }
  ThreadPool pool(2);
  paged_attention(args, pool);
  args.kv.recent = nullptr;
  args.out = without.data();
  paged_attention(args, pool);
  for (size_t i = 0; i < qn; ++i)
    ASSERT_NEAR(with[i], without[i], 1e-5 * (1 + std::abs(without[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(Sink, SameRowsTest, ::testing::Bool());

}  // namespace
}  // namespace kvs
