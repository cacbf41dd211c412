// The dashboard's numbers: bucket-interpolated quantiles, the chart JSON, and the capacity line
// (which must agree with plan_kv_pool, the function that sizes the engine's pool).
#include <gtest/gtest.h>

#include "server/capacity_line.h"
#include "server/dashboard_stats.h"
#include "server/metrics.h"

namespace kvs {
namespace {

TEST(DashboardStats, QuantilesInterpolateInsideBuckets) {
  Histogram h({0.1, 0.2, 0.5});
  EXPECT_FALSE(h.quantile(0.5).has_value());
  for (int i = 0; i < 10; ++i) h.observe(0.05);  // (0, 0.1]
  for (int i = 0; i < 10; ++i) h.observe(0.15);  // (0.1, 0.2]
  // rank 10 of 20 is the last observation of the first bucket: its upper bound.
  EXPECT_NEAR(*h.quantile(0.5), 0.1, 1e-12);
  // rank 15 is half-way through the second bucket.
  EXPECT_NEAR(*h.quantile(0.75), 0.15, 1e-12);
  EXPECT_NEAR(*h.quantile(0.0), 0.0, 1e-12);
  h.observe(9.0);  // +Inf bucket: reported as the highest finite bound
  EXPECT_NEAR(*h.quantile(1.0), 0.5, 1e-12);
}

TEST(DashboardStats, ChartJsonHasEveryBucketAndNoNumbersWithoutData) {
  ServerMetrics m;
  m.observe_ttft(0.04, 10);
  m.observe_ttft(0.3, 600);
  m.observe_inter_token(0.012);
  m.observe_finished("/v1/chat/completions", 1.0, 100, 64, 20, {0.12}, "stop");
  const nlohmann::json j = dashboard_stats_json(
      m.summary(), {{.label = "alice", .query_tokens = 100, .hit_tokens = 64, .blocks_held = 9}});
  EXPECT_EQ(j["quantiles"], "bucket-interpolated");
  ASSERT_EQ(j["ttft"].size(), 4u);
  EXPECT_EQ(j["ttft"][0]["bucket"], "1-127");
  EXPECT_EQ(j["ttft"][0]["count"], 1);
  EXPECT_TRUE(j["ttft"][1]["p50"].is_null());
  EXPECT_EQ(j["ttft"][2]["count"], 1);
  EXPECT_EQ(j["itl"]["count"], 1);
  EXPECT_EQ(j["length_fraction"]["count"], 1);
  EXPECT_EQ(j["length_fraction"]["counts"].size(), j["length_fraction"]["bounds"].size() + 1);
  EXPECT_EQ(j["routes"][0]["route"], "/v1/chat/completions");
  EXPECT_EQ(j["routes"][0]["hit"], 64);
  EXPECT_EQ(j["tenants"][0]["label"], "alice");
  EXPECT_EQ(j["tenants"][0]["blocks"], 9);
}

KvUniformShape smol_shape(KvDtype d) {
  return {
      .layers = 30, .kv_heads = 3, .head_dim_k = 64, .head_dim_v = 64, .k_dtype = d, .v_dtype = d};
}

TEST(DashboardCapacity, AgreesWithThePoolPlanAndPricesTheLevers) {
  const uint64_t memory = uint64_t{512} << 20;
  const KvPoolPlan pool = *plan_kv_pool(smol_shape(KvDtype::kF16), memory, 16);
  const CapacityLine c = capacity_line(pool, memory, 2048);
  EXPECT_EQ(c.bytes_per_token, 23040u);
  EXPECT_EQ(c.formula, pool.formula);
  EXPECT_EQ(c.num_blocks, pool.num_blocks);
  EXPECT_EQ(c.pool_bytes, pool.pool_bytes);
  EXPECT_EQ(c.blocks_per_request, 128u);
  EXPECT_EQ(c.fully_reserved, pool.num_blocks / 128);
  EXPECT_NEAR(c.max_concurrency, static_cast<double>(pool.num_tokens) / 2048, 1e-9);
  ASSERT_EQ(c.levers.size(), 9u);
  const CapacityLever& fp8 = c.levers[0];
  ASSERT_TRUE(fp8.applicable);
  const KvPoolPlan fp8_pool = *plan_kv_pool(smol_shape(KvDtype::kFp8E4M3), memory, 16);
  EXPECT_EQ(fp8.bytes_per_token, 11520u);
  EXPECT_EQ(fp8.num_blocks, fp8_pool.num_blocks);
  EXPECT_EQ(fp8.more_requests, static_cast<int64_t>(fp8_pool.num_blocks / 128) -
                                   static_cast<int64_t>(c.fully_reserved));
  const CapacityLever& int4 = c.levers[1];
  ASSERT_TRUE(int4.applicable);
  EXPECT_GT(int4.more_requests, fp8.more_requests);
  const CapacityLever& half = c.levers[8];
  EXPECT_EQ(half.change, "--max-model-len 1024");
  EXPECT_EQ(half.fully_reserved, pool.num_blocks / 64);
  const nlohmann::json j = capacity_json(c);
  EXPECT_EQ(j["levers"].size(), 9u);
  EXPECT_EQ(j["num_blocks"], pool.num_blocks);
}

TEST(DashboardCapacity, LeversThatDoNotApplySayWhy) {
  const uint64_t memory = uint64_t{64} << 20;
  const KvPoolPlan pool = *plan_kv_pool(smol_shape(KvDtype::kInt4), memory, 16);
  const CapacityLine c = capacity_line(pool, memory, 1024);
  EXPECT_FALSE(c.levers[0].applicable);
  EXPECT_EQ(c.levers[0].why_not, "KV is already 8 bits or less");
  EXPECT_FALSE(c.levers[1].applicable);
  EXPECT_EQ(c.levers[1].why_not, "already int4");
}

}  // namespace
}  // namespace kvs
