// capacity_plan: paging vs contiguous reservation, the expected case, the verdict and prefix
// sharing, on small shapes whose numbers are easy to check by hand.
#include "planner/capacity_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "kvcache/kv_pool_plan.h"

namespace kvs {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// 1 layer, 1 KV head, head_dim 64, f32: 512 B per token.
KvModelShape tiny() {
  return KvModelShape::uniform({.layers = 1,
                                .kv_heads = 1,
                                .head_dim_k = 64,
                                .head_dim_v = 64,
                                .k_dtype = KvDtype::kF32,
                                .v_dtype = KvDtype::kF32});
}

PlanInputs base(uint64_t memory, uint64_t context) {
  PlanInputs in;
  in.shape = tiny();
  in.gpu_memory_bytes = memory;
  in.gpu_memory_utilization = 1.0;
  in.workload.context = context;
  return in;
}

TEST(CapacityPlan, PagingRoundsUpToWholeBlocks) {
  PlanInputs in = base(1'000'000, 100);
  in.workload.block_size = 16;
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->request.total, 100u * 512);
  EXPECT_EQ(p->request_paged, 112u * 512);  // 7 blocks of 16
  EXPECT_EQ(p->c_max_worst, 1'000'000u / (112 * 512));
  in.workload.block_size = 0;
  p = plan_capacity(in);
  EXPECT_EQ(p->request_paged, 100u * 512);
  EXPECT_EQ(kv_request_bytes_paged(tiny(), 0, 16), 0u);
  EXPECT_EQ(kv_request_bytes_paged(tiny(), 16, 16), 16u * 512);
  EXPECT_EQ(kv_request_bytes_paged(tiny(), 17, 16), 32u * 512);
}

TEST(CapacityPlan, WeightsAndWorkspaceComeOff) {
  PlanInputs in = base(10 * kGiB, 1024);
  in.gpu_memory_utilization = 0.5;
  in.weights_bytes = 2 * kGiB;
  in.workspace_bytes = 1 * kGiB;
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->usable_bytes, 5 * kGiB);
  EXPECT_EQ(p->kv_budget, 2 * kGiB);
  // Weights larger than memory: nothing fits, budget is clamped at 0 but reported negative.
  in.weights_bytes = 20 * kGiB;
  p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->kv_budget, 0u);
  EXPECT_LT(p->kv_budget_signed, 0);
  EXPECT_EQ(p->c_max_worst, 0u);
  EXPECT_FALSE(p->fits);
}

TEST(CapacityPlan, UtilizationIsExact) {
  EXPECT_EQ(apply_utilization(80'000'000'000, 0.9), 72'000'000'000u);
  EXPECT_EQ(apply_utilization(80 * kGiB, 0.9), 72 * kGiB);
  EXPECT_EQ(apply_utilization(141 * kGiB, 0.95), 141 * kGiB * 95 / 100);
  // The H100-80GB preset, 81,559 MiB as the device reports it.
  EXPECT_EQ(apply_utilization(85'520'809'984, 0.9), 76'968'728'985u);
}

TEST(CapacityPlan, ExpectedCaseWithDistributionVsContiguous) {
  PlanInputs in = base(512 * 1000 * 16, 1000);  // room for 16 full-length requests
  in.workload.block_size = 10;
  in.workload.length_distribution = {{100, 3}, {1000, 1}, {5000, 1}};  // 5000 clamps to 1000
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  ASSERT_TRUE(p->has_expected);
  EXPECT_DOUBLE_EQ(p->expected_tokens, (300.0 + 1000 + 1000) / 5);
  EXPECT_DOUBLE_EQ(p->expected_request_exact, 460.0 * 512);
  EXPECT_DOUBLE_EQ(p->expected_request_paged, 460.0 * 512);  // all multiples of 10
  EXPECT_EQ(p->c_max_worst, 16u);
  EXPECT_EQ(p->c_max_contiguous, 16u);  // a contiguous allocator reserves 1000 tokens each
  EXPECT_EQ(p->c_max_expected, 34u);    // 16,000 / 460
  EXPECT_DOUBLE_EQ(p->contiguous_waste_per_request, 540.0 * 512);
  EXPECT_DOUBLE_EQ(p->paging_waste_per_request, 0.0);
  // A single average is a point estimate: every request at 250 tokens, 256 paged.
  in.workload.length_distribution.clear();
  in.workload.avg_tokens = 250;
  p = plan_capacity(in);
  EXPECT_DOUBLE_EQ(p->expected_request_paged, 250.0 * 512);
  in.workload.block_size = 16;
  p = plan_capacity(in);
  EXPECT_DOUBLE_EQ(p->expected_request_paged, 256.0 * 512);
  EXPECT_DOUBLE_EQ(p->paging_waste_per_request, 6.0 * 512);
}

TEST(CapacityPlan, VerdictAndLargestContext) {
  PlanInputs in = base(512 * 16 * 100, 1600);  // 100 blocks of 16 tokens
  in.workload.concurrency = 2;
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_FALSE(p->fits);  // 2 x 1600 tokens = 200 blocks
  EXPECT_EQ(p->max_context, 800u);
  EXPECT_EQ(p->c_max_worst, 1u);
  in.workload.concurrency = 1;
  p = plan_capacity(in);
  EXPECT_TRUE(p->fits);
  EXPECT_EQ(p->max_context, 1600u);
  // All layers windowed: any context fits once the window does.
  in.shape.layers = {KvLayer::sliding(1, 64, 64, 256)};
  in.workload.concurrency = 6;  // 6 x 256 x 512 B = 786,432 B <= 819,200 B
  p = plan_capacity(in);
  EXPECT_TRUE(p->fits);
  EXPECT_TRUE(p->context_unbounded);
}

TEST(CapacityPlan, PrefixSharingStoresTheSharedBlocksOnce) {
  PlanInputs in = base(512 * 16 * 100, 320);  // 100 blocks; a request is 20 blocks
  in.workload.shared_prefix = 170;            // 10 whole blocks are shared (160 tokens)
  in.workload.concurrency = 5;
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->c_max_worst, 5u);
  EXPECT_EQ(p->shared_prefix_tokens, 160u);
  EXPECT_EQ(p->prefix_bytes, 160u * 512);
  EXPECT_EQ(p->request_unique_bytes, 160u * 512);
  EXPECT_EQ(p->c_max_with_prefix, 9u);  // (100 - 10) / 10
  EXPECT_EQ(p->prefix_freed_bytes, 4u * 160 * 512);
  // Windowed layers only share the part of the prefix still inside their window.
  in.shape.layers = {KvLayer::sliding(1, 64, 64, 200)};
  p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->prefix_bytes, 40u * 512);  // window holds [120, 320): 40 prefix tokens
}

TEST(CapacityPlan, WindowedLayersChunkAwareOnlyWhenAsked) {
  // One windowed layer (window 200) of 512 B per token, blocks of 16, a 1,000-token request.
  PlanInputs in = base(512 * 16 * 100, 1000);
  in.shape.layers = {KvLayer::sliding(1, 64, 64, 200)};
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->request.total, 200u * 512);  // default: min(N, window)
  EXPECT_EQ(p->request_paged, 208u * 512);  // rounded up to 13 blocks
  // Steps of up to 64 tokens: a step ending at m holds [m - 263, m), window - 1 + 64 = 263
  // tokens; ending at 1,000 that is [737, 1000), blocks 46..62, 17 blocks. On its way to 1,000
  // the request also met the step ending at 994, [731, 994), blocks 45..62: 18 blocks, the most
  // 263 positions can span (ceil(262 / 16) + 1). The plan counts that peak.
  in.workload.window_chunk_tokens = 64;
  p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->request.total, 263u * 512);
  EXPECT_EQ(p->request_paged, 18u * 16 * 512);
  EXPECT_EQ(p->c_max_worst, 100u / 18);
  // Prefix sharing counts the positions the window holds: [737, 1000) includes none of 160.
  in.workload.shared_prefix = 160;
  p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->prefix_bytes, 0u);
  in.workload.window_chunk_tokens = uint64_t{1} << 31;
  EXPECT_FALSE(plan_capacity(in).is_ok());
}

TEST(CapacityPlan, StepAwarePagingIsThePeakOnTheWayToN) {
  // Reference model: the most any step of up to `chunk` tokens ending at m <= n holds, by brute
  // force over every m, summed over one full layer and two windows (200 and 37) of 512 B/token.
  const KvModelShape s = [] {
    KvModelShape x = tiny();
    x.layers = {KvLayer::full(1, 64, 64), KvLayer::sliding(1, 64, 64, 200),
                KvLayer::sliding(1, 64, 64, 37)};
    return x;
  }();
  for (uint64_t chunk : {1u, 5u, 16u, 64u}) {
    uint64_t brute = 0, previous = 0;
    for (uint64_t n = 0; n <= 700; ++n) {
      uint64_t at_n = 0;
      for (const KvLayer& l : s.layers) at_n += 512 * kv_layer_held_slots(l, n, 16, chunk);
      brute = std::max(brute, at_n);
      const uint64_t got = kv_request_bytes_paged(s, n, 16, chunk);
      ASSERT_EQ(got, brute) << "chunk " << chunk << ", n " << n;
      ASSERT_GE(got, previous) << "chunk " << chunk << ", n " << n;  // never shrinks as n grows
      previous = got;
    }
  }
  // Hence the largest context is one every shorter request also fits. Budget 29 blocks of
  // 16 x 512 B, steps of up to 64 tokens (window 37 holds window - 1 + 64 = 100 positions):
  //   n = 160: full 10 blocks + window 200 all 160 tokens, 10 + window 37 [60, 160), blocks 3..9,
  //            7 = 27: fits;
  //   n = 161: 11 + 11 + [61, 161), blocks 3..10, 8 = 30: does not;
  //   n = 176: 11 + 11 + [76, 176), blocks 4..10, 7 = 29 would fit on its own, but a request
  //            reaches 176 tokens through 161. So 160, not 176.
  PlanInputs in = base(29 * 16 * 512, 64);
  in.shape = s;
  in.workload.window_chunk_tokens = 64;
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->max_context, 160u);
  EXPECT_FALSE(p->context_unbounded);
}

// The engine's f16 rows beside the blocks (the recent-token window's ring, the sink's rows, the
// per-channel keys' tail) are held by every request, so they count in each one.
TEST(CapacityPlan, EachRequestHoldsTheEnginesRowsBesideItsBlocks) {
  PlanInputs in = base(1'000'000, 100);
  in.workload.block_size = 16;
  in.shape.recent_window = 16;
  in.shape.attention_sink = true;
  auto p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  // (16 + 16 + 2) rows of K and V, 64 f16 each.
  const uint64_t rows = (16 + 16 + 2) * 64 * 2 * 2;
  EXPECT_EQ(p->per_token.rows_per_sequence.total(), rows);
  EXPECT_EQ(p->request.total, 100u * 512 + rows);
  EXPECT_EQ(p->request_paged, 112u * 512 + rows);
  EXPECT_EQ(p->c_max_worst, 1'000'000u / (112 * 512 + rows));
  // Per-channel keys add one group's keys (16 of them, f16).
  in.shape.k_dtype = KvDtype::kInt4Chan;
  in.shape.v_dtype = KvDtype::kInt4Had;
  p = plan_capacity(in);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->per_token.rows_per_sequence.total(), rows + 16 * 64 * 2);
  // The engine's pool takes the same rows for each of its sequences.
  KvModelShape engine = in.shape;
  engine.recent_window = 0;
  engine.attention_sink = false;
  const auto pool = plan_kv_pool(engine, 64 << 20, 16, 8, 16, true);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ(pool->recent_window_bytes + pool->key_tail_bytes,
            8 * p->per_token.rows_per_sequence.total());
  // A window the engine does not take, or a sink without one, is refused.
  in.shape.recent_window = 24;
  EXPECT_FALSE(plan_capacity(in).is_ok());
  in.shape.recent_window = 0;
  EXPECT_FALSE(plan_capacity(in).is_ok());
}

// A model of sliding and full layers (Gemma 3 270M's shape: layer groups in the pool) holds the
// same rows per sequence in the plan as in the engine's pool.
TEST(CapacityPlan, RowsPerRequestAreThePoolsPerSequenceWithLayerGroups) {
  KvModelShape s;
  for (uint32_t i = 0; i < 18; ++i)
    s.layers.push_back((i + 1) % 6 == 0 ? KvLayer::full(1, 256, 256)
                                        : KvLayer::sliding(1, 256, 256, 512));
  s.k_dtype = KvDtype::kInt2Chan;
  s.v_dtype = KvDtype::kInt2Had;
  const auto pool = plan_kv_pool(s, 256 << 20, 16, 8, 128, true);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  ASSERT_GT(pool->groups.num_groups(), 1u);
  s.recent_window = 128;
  s.attention_sink = true;
  EXPECT_EQ(pool->recent_window_bytes + pool->key_tail_bytes,
            8 * kv_shape_bytes(s).rows_per_sequence.total());
  // An MLA latent has no heads for the window to keep.
  KvModelShape mla;
  mla.layers = {KvLayer::mla(512, 64)};
  mla.recent_window = 128;
  EXPECT_FALSE(validate_kv_shape(mla).is_ok());
}

TEST(CapacityPlan, RejectsBadInput) {
  PlanInputs in = base(kGiB, 0);
  EXPECT_FALSE(plan_capacity(in).is_ok());
  in = base(kGiB, 100);
  in.gpu_memory_utilization = 1.5;
  EXPECT_FALSE(plan_capacity(in).is_ok());
  in = base(kGiB, 100);
  in.workload.shared_prefix = 100;
  EXPECT_FALSE(plan_capacity(in).is_ok());
  in = base(kGiB, 100);
  in.workload.concurrency = 0;
  EXPECT_FALSE(plan_capacity(in).is_ok());
  in = base(0, 100);
  EXPECT_FALSE(plan_capacity(in).is_ok());
}

}  // namespace
}  // namespace kvs
