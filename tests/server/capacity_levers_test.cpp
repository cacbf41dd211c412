// The dashboard's capacity line offers the planner's KV-format and context levers
// (planner/kv_format_levers.h), with the same reasons `kvserve plan` gives
// (tests/planner/kv_format_levers_test.cpp).
#include <gtest/gtest.h>

#include "planner/kv_format_levers.h"
#include "planner/plan_levers.h"
#include "server/capacity_line.h"

namespace kvs {
namespace {

KvModelShape shape(KvDtype k, KvDtype v) {
  return {.layers = std::vector<KvLayer>(4, KvLayer::full(2, 64, 64)), .k_dtype = k, .v_dtype = v};
}

// The two disagreed for a pool already in fp8_e4m3; both now say "already fp8_e4m3".
TEST(CapacityLevers, AnFp8PoolSaysItIsAlreadyFp8) {
  const uint64_t memory = uint64_t{64} << 20;
  const KvPoolPlan pool = *plan_kv_pool(shape(KvDtype::kFp8E4M3, KvDtype::kFp8E4M3), memory, 16);
  const CapacityLine c = capacity_line(pool, memory, 1024);
  ASSERT_EQ(c.levers.size(), 9u);
  EXPECT_EQ(c.levers[0].name, "KV fp8 (e4m3)");
  EXPECT_FALSE(c.levers[0].applicable);
  EXPECT_EQ(c.levers[0].why_not, "already fp8_e4m3");
  EXPECT_TRUE(c.levers[1].applicable);  // int4 still halves it
  EXPECT_EQ(c.levers[8].name, "half the context");
  EXPECT_EQ(c.levers[8].change, "--max-model-len 512");
}

// The per-channel levers are priced as the engine would size its pool in those formats: the
// keys' tails for the pool's max_num_seqs come out of the memory first.
TEST(CapacityLevers, PerChannelLeversCountTheKeyTailsOfThePoolsSequences) {
  const uint64_t memory = uint64_t{64} << 20;
  const KvPoolPlan pool = *plan_kv_pool(shape(KvDtype::kF16, KvDtype::kF16), memory, 16, 48);
  const CapacityLine c = capacity_line(pool, memory, 1024);
  ASSERT_EQ(c.levers.size(), 9u);
  const KvDtype formats[3][2] = {{KvDtype::kInt4Chan, KvDtype::kInt4Had},
                                 {KvDtype::kInt3Chan, KvDtype::kInt3Had},
                                 {KvDtype::kInt2Chan, KvDtype::kInt2Had}};
  uint64_t last_blocks = 0;
  for (int i = 0; i < 3; ++i) {
    const CapacityLever& l = c.levers[2 + i];
    SCOPED_TRACE(l.name);
    ASSERT_TRUE(l.applicable) << l.why_not;
    const KvPoolPlan want = *plan_kv_pool(shape(formats[i][0], formats[i][1]), memory, 16, 48);
    EXPECT_GT(want.key_tail_bytes, 0u);
    EXPECT_EQ(l.num_blocks, want.num_blocks);
    EXPECT_EQ(l.bytes_per_token, want.bytes_per_token);
    EXPECT_EQ(l.change, std::string("--kv-cache-dtype-k ") + kv_dtype_name(formats[i][0]) +
                            " --kv-cache-dtype-v " + kv_dtype_name(formats[i][1]));
    EXPECT_GT(l.num_blocks, last_blocks);  // fewer bits, more blocks
    last_blocks = l.num_blocks;
  }
  // A block size that is not a multiple of 16 tokens: the pool plan's reason, naming the flag.
  const KvPoolPlan odd = *plan_kv_pool(shape(KvDtype::kF16, KvDtype::kF16), memory, 8, 48);
  const CapacityLine co = capacity_line(odd, memory, 1024);
  EXPECT_FALSE(co.levers[2].applicable);
  EXPECT_NE(co.levers[2].why_not.find("--block-size must be a multiple of 16"), std::string::npos)
      << co.levers[2].why_not;
  // Already in the lever's formats.
  const KvPoolPlan two =
      *plan_kv_pool(shape(KvDtype::kInt2Chan, KvDtype::kInt2Had), memory, 16, 48);
  const CapacityLine ct = capacity_line(two, memory, 1024);
  EXPECT_FALSE(ct.levers[4].applicable);
  EXPECT_EQ(ct.levers[4].why_not, "already int2_chan/int2_had");
  EXPECT_TRUE(ct.levers[2].applicable);
}

// Keys per channel over 64 tokens: at a block size of 64 the lever is priced as the engine would
// size that pool (int4_had's bytes per token, 64-row key tails first); at 16 it says what to
// change.
TEST(CapacityLevers, KeysPer64TokensArePricedAtABlockSizeThatHoldsAGroup) {
  const uint64_t memory = uint64_t{256} << 20;
  const KvPoolPlan pool = *plan_kv_pool(shape(KvDtype::kF16, KvDtype::kF16), memory, 64, 8);
  const CapacityLine c = capacity_line(pool, memory, 1024);
  ASSERT_EQ(c.levers.size(), 9u);
  const CapacityLever& l = c.levers[5];
  EXPECT_EQ(l.name, "KV 4-bit, K per channel /64");
  ASSERT_TRUE(l.applicable) << l.why_not;
  const KvPoolPlan want =
      *plan_kv_pool(shape(KvDtype::kInt4Chan64, KvDtype::kInt4Had), memory, 64, 8);
  EXPECT_EQ(l.num_blocks, want.num_blocks);
  EXPECT_EQ(
      l.bytes_per_token,
      plan_kv_pool(shape(KvDtype::kInt4Had, KvDtype::kInt4Had), memory, 64, 8)->bytes_per_token);
  EXPECT_EQ(l.change, "--kv-cache-dtype-k int4_chan64 --kv-cache-dtype-v int4_had");
  const KvPoolPlan small = *plan_kv_pool(shape(KvDtype::kF16, KvDtype::kF16), memory, 16, 8);
  const CapacityLine cs = capacity_line(small, memory, 1024);
  EXPECT_FALSE(cs.levers[5].applicable);
  EXPECT_EQ(cs.levers[5].why_not, "--block-size must be a multiple of 64 (it is 16)");
}

// With a recent-token window, every lever keeps it: its f16 rows for the pool's sequences come
// out of the same memory in the lever's pool too.
// Per-layer formats: the line names them, and a format lever keeps them (the pool the engine
// would size with that flag changed) or says why it cannot.
TEST(CapacityLevers, LeversKeepThePerLayerFormats) {
  const uint64_t memory = uint64_t{64} << 20;
  KvModelShape s = shape(KvDtype::kF16, KvDtype::kF16);
  s.layer_formats.v = {{2, KvDtype::kInt8}};
  const KvPoolPlan pool = *plan_kv_pool(s, memory, 16, 8);
  const CapacityLine c = capacity_line(pool, memory, 1024);
  EXPECT_EQ(c.layer_formats, " + layers V 2=int8");
  EXPECT_EQ(capacity_json(c)["layer_formats"], " + layers V 2=int8");
  const CapacityLever& int4 = c.levers[1];  // K and V int4, layer 2's values still int8
  ASSERT_TRUE(int4.applicable) << int4.why_not;
  KvModelShape want = shape(KvDtype::kInt4, KvDtype::kInt4);
  want.layer_formats = s.layer_formats;
  EXPECT_EQ(int4.num_blocks, plan_kv_pool(want, memory, 16, 8)->num_blocks);
  EXPECT_LT(int4.num_blocks,
            plan_kv_pool(shape(KvDtype::kInt4, KvDtype::kInt4), memory, 16, 8)->num_blocks);
  KvModelShape keys = shape(KvDtype::kF16, KvDtype::kF16);
  keys.layer_formats.k = {{2, KvDtype::kInt8}};
  const CapacityLine ck = capacity_line(*plan_kv_pool(keys, memory, 16, 8), memory, 1024);
  const CapacityLever& chan = ck.levers[2];  // int4_chan keys: layer 2's int8 is per token
  EXPECT_FALSE(chan.applicable);
  EXPECT_NE(chan.why_not.find("--kv-cache-dtype-k-layers: layer 2"), std::string::npos)
      << chan.why_not;
}

TEST(CapacityLevers, LeversKeepTheRecentWindow) {
  const uint64_t memory = uint64_t{256} << 20;
  const KvPoolPlan pool = *plan_kv_pool(shape(KvDtype::kF16, KvDtype::kF16), memory, 16, 8, 64);
  ASSERT_GT(pool.recent_window_bytes, 0u);
  const CapacityLine c = capacity_line(pool, memory, 1024);
  const CapacityLever& two = c.levers[4];
  ASSERT_TRUE(two.applicable) << two.why_not;
  const KvPoolPlan want =
      *plan_kv_pool(shape(KvDtype::kInt2Chan, KvDtype::kInt2Had), memory, 16, 8, 64);
  EXPECT_EQ(want.recent_window_bytes, pool.recent_window_bytes);
  // The line says what the budget holds besides the blocks.
  EXPECT_EQ(c.recent_window, 64u);
  EXPECT_EQ(c.recent_window_bytes, pool.recent_window_bytes);
  EXPECT_EQ(c.max_num_seqs, 8u);
  EXPECT_EQ(c.key_tail_bytes, 0u);
  EXPECT_LE(c.pool_bytes + c.recent_window_bytes, memory);
  const nlohmann::json j = capacity_json(c);
  EXPECT_EQ(j["recent_window_bytes"], pool.recent_window_bytes);
  EXPECT_EQ(j["recent_window"], 64);
  EXPECT_EQ(j["key_tail_bytes"], 0);
  EXPECT_EQ(j["max_num_seqs"], 8);
  const KvPoolPlan chan =
      *plan_kv_pool(shape(KvDtype::kInt4Chan, KvDtype::kInt4Had), memory, 16, 8, 64);
  const CapacityLine cc = capacity_line(chan, memory, 1024);
  EXPECT_GT(cc.key_tail_bytes, 0u);
  EXPECT_EQ(cc.key_tail_bytes, chan.key_tail_bytes);
  EXPECT_EQ(capacity_json(cc)["key_tail_bytes"], chan.key_tail_bytes);
  EXPECT_LE(cc.pool_bytes + cc.key_tail_bytes + cc.recent_window_bytes, memory);
  EXPECT_EQ(two.num_blocks, want.num_blocks);
  EXPECT_LT(two.num_blocks,
            plan_kv_pool(shape(KvDtype::kInt2Chan, KvDtype::kInt2Had), memory, 16, 8)->num_blocks);
}

TEST(CapacityLevers, SameLeversAndReasonsAsThePlan) {
  const uint64_t memory = uint64_t{64} << 20;
  for (KvDtype k :
       {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kFp8E5M2, KvDtype::kInt8,
        KvDtype::kInt8Had, KvDtype::kQ8_0Had, KvDtype::kInt4, KvDtype::kQ4_0}) {
    for (KvDtype v : {KvDtype::kF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
      SCOPED_TRACE(std::string(kv_dtype_name(k)) + "/" + kv_dtype_name(v));
      const KvPoolPlan pool = *plan_kv_pool(shape(k, v), memory, 16);
      const CapacityLine c = capacity_line(pool, memory, 1024);
      PlanInputs in{.shape = shape(k, v),
                    .gpu_memory_bytes = uint64_t{1} << 30,
                    .workload = {.context = 1024}};
      const std::vector<Lever> plan = compute_levers(in, *plan_capacity(in));
      const std::vector<KvFormatLever> rule = kv_format_levers(k, v, 16);
      ASSERT_EQ(c.levers.size(), rule.size() + 1);
      for (size_t i = 0; i < rule.size(); ++i) {
        EXPECT_EQ(c.levers[i].name, rule[i].name);
        EXPECT_EQ(c.levers[i].applicable, rule[i].why_not.empty());
        EXPECT_EQ(c.levers[i].why_not, rule[i].why_not);
        bool in_plan = false;
        for (const Lever& l : plan) {
          if (l.name != c.levers[i].name) continue;
          in_plan = true;
          EXPECT_EQ(l.applicable, c.levers[i].applicable);
          EXPECT_EQ(l.why_not, c.levers[i].why_not);
        }
        EXPECT_TRUE(in_plan) << c.levers[i].name;
      }
    }
  }
}

}  // namespace
}  // namespace kvs
