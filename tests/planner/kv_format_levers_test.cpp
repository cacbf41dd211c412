// kv_format_levers: the one rule for which KV-format levers apply, as `kvserve plan` shows it
// (compute_levers). tests/server/capacity_levers_test.cpp checks the dashboard says the same.
#include "planner/kv_format_levers.h"

#include <gtest/gtest.h>

#include "planner/plan_levers.h"

namespace kvs {
namespace {

const KvFormatLever& lever(const std::vector<KvFormatLever>& levers, const std::string& prefix) {
  for (const KvFormatLever& l : levers)
    if (l.name.rfind(prefix, 0) == 0) return l;
  ADD_FAILURE() << prefix;
  return levers.front();
}

TEST(KvFormatLevers, Fp8AppliesUnlessEveryElementIsAByteOrLess) {
  auto l = kv_format_levers(KvDtype::kF16, KvDtype::kF16, 64);
  ASSERT_EQ(l.size(), 8u);
  EXPECT_EQ(l[0].name, "KV fp8 (e4m3)");
  EXPECT_EQ(l[0].k_dtype, KvDtype::kFp8E4M3);
  EXPECT_EQ(l[0].v_dtype, KvDtype::kFp8E4M3);
  EXPECT_TRUE(l[0].why_not.empty());
  EXPECT_EQ(l[1].name, "KV int4 (+f16 scale/32)");
  EXPECT_EQ(l[1].k_dtype, KvDtype::kInt4);
  EXPECT_EQ(l[1].v_dtype, KvDtype::kInt4);
  EXPECT_TRUE(l[1].why_not.empty());
  EXPECT_EQ(l[2].name, "KV 4-bit, K per channel");
  EXPECT_EQ(l[2].k_dtype, KvDtype::kInt4Chan);
  EXPECT_EQ(l[2].v_dtype, KvDtype::kInt4Had);
  EXPECT_EQ(l[3].k_dtype, KvDtype::kInt3Chan);
  EXPECT_EQ(l[3].v_dtype, KvDtype::kInt3Had);
  EXPECT_EQ(l[4].name, "KV 2-bit, K per channel");
  EXPECT_EQ(l[4].k_dtype, KvDtype::kInt2Chan);
  EXPECT_EQ(l[4].v_dtype, KvDtype::kInt2Had);
  EXPECT_EQ(l[5].name, "KV 4-bit, K per channel /64");
  EXPECT_EQ(l[5].k_dtype, KvDtype::kInt4Chan64);
  EXPECT_EQ(l[5].v_dtype, KvDtype::kInt4Had);
  EXPECT_EQ(l[6].name, "KV 2-bit /64, widest K channels 3-bit");
  EXPECT_EQ(l[6].k_dtype, KvDtype::kInt2MixChan64);
  EXPECT_EQ(l[6].v_dtype, KvDtype::kInt2Had64);
  EXPECT_EQ(l[7].name, "KV 2-bit /64, trellis-coded V");
  EXPECT_EQ(l[7].k_dtype, KvDtype::kInt2MixChan64);
  EXPECT_EQ(l[7].v_dtype, KvDtype::kInt2Tcq64);
  for (const KvFormatLever& f : l) EXPECT_TRUE(f.why_not.empty()) << f.name;
  // At a block size that does not hold 64 tokens the 64-token levers say what to change.
  const auto small = kv_format_levers(KvDtype::kF16, KvDtype::kF16, 16);
  EXPECT_EQ(small[6].why_not, "--block-size must be a multiple of 64 (it is 16)");
  EXPECT_EQ(kv_format_levers(KvDtype::kInt2MixChan64, KvDtype::kInt2Had64, 64)[6].why_not,
            "already int2mix_chan64/int2_had64");
  EXPECT_EQ(small[7].why_not, "--block-size must be a multiple of 64 (it is 16)");
  EXPECT_EQ(kv_format_levers(KvDtype::kInt2MixChan64, KvDtype::kInt2Tcq64, 64)[7].why_not,
            "already int2mix_chan64/int2_tcq64");
  EXPECT_TRUE(
      kv_format_levers(KvDtype::kInt2MixChan64, KvDtype::kInt2Had64, 64)[7].why_not.empty());
  // One side wider than a byte: fp8 still shrinks it.
  EXPECT_TRUE(lever(kv_format_levers(KvDtype::kF16, KvDtype::kInt8, 16), "KV fp8").why_not.empty());
  EXPECT_EQ(lever(kv_format_levers(KvDtype::kInt8, KvDtype::kQ4_0, 16), "KV fp8").why_not,
            "KV is already 8 bits or less");
  EXPECT_EQ(lever(kv_format_levers(KvDtype::kFp8E5M2, KvDtype::kFp8E5M2, 16), "KV fp8").why_not,
            "KV is already 8 bits or less");
}

// The two homes disagreed here: `kvserve plan` said "already fp8_e4m3", the dashboard "KV is
// already 8 bits or less". The precise reason wins (as "already int4" does for the int4 lever).
TEST(KvFormatLevers, AlreadyInTheLeversFormatSaysSo) {
  const auto fp8 = kv_format_levers(KvDtype::kFp8E4M3, KvDtype::kFp8E4M3, 16);
  EXPECT_EQ(lever(fp8, "KV fp8").why_not, "already fp8_e4m3");
  EXPECT_TRUE(lever(fp8, "KV int4").why_not.empty());
  const auto int4 = kv_format_levers(KvDtype::kInt4, KvDtype::kInt4, 16);
  EXPECT_EQ(lever(int4, "KV fp8").why_not, "KV is already 8 bits or less");
  EXPECT_EQ(lever(int4, "KV int4").why_not, "already int4");
  const auto two = kv_format_levers(KvDtype::kInt2Chan, KvDtype::kInt2Had, 16);
  EXPECT_EQ(lever(two, "KV 2-bit").why_not, "already int2_chan/int2_had");
  EXPECT_TRUE(lever(two, "KV 3-bit").why_not.empty());
  // Only the keys per channel: the lever still moves V.
  EXPECT_TRUE(
      lever(kv_format_levers(KvDtype::kInt2Chan, KvDtype::kInt8, 16), "KV 2-bit").why_not.empty());
  // Only K in int4: the lever still moves V.
  EXPECT_TRUE(
      lever(kv_format_levers(KvDtype::kInt4, KvDtype::kF16, 16), "KV int4").why_not.empty());
}

TEST(KvFormatLevers, HalfTheContextIsAtLeastOneToken) {
  EXPECT_EQ(half_context(8192), 4096u);
  EXPECT_EQ(half_context(3), 1u);
  EXPECT_EQ(half_context(1), 1u);
  EXPECT_EQ(half_context(0), 1u);
}

// compute_levers offers exactly these, with these reasons, for every pair of formats.
TEST(KvFormatLevers, PlanLeversFollowTheRule) {
  for (const KvDtypeInfo* k : {&kv_dtype_info(KvDtype::kF16), &kv_dtype_info(KvDtype::kFp8E4M3),
                               &kv_dtype_info(KvDtype::kInt8), &kv_dtype_info(KvDtype::kInt4)}) {
    for (const KvDtypeInfo* v : {&kv_dtype_info(KvDtype::kF16), &kv_dtype_info(KvDtype::kFp8E4M3),
                                 &kv_dtype_info(KvDtype::kInt4)}) {
      SCOPED_TRACE(std::string(k->name) + "/" + v->name);
      PlanInputs in{.shape = {.layers = std::vector<KvLayer>(4, KvLayer::full(2, 64, 64)),
                              .k_dtype = k->dtype,
                              .v_dtype = v->dtype},
                    .gpu_memory_bytes = uint64_t{1} << 30,
                    .workload = {.context = 1024}};
      const auto plan = plan_capacity(in);
      ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
      const std::vector<Lever> levers = compute_levers(in, *plan);
      for (const KvFormatLever& f : kv_format_levers(k->dtype, v->dtype, in.workload.block_size)) {
        bool seen = false;
        for (const Lever& l : levers) {
          if (l.name != f.name) continue;
          seen = true;
          EXPECT_EQ(l.applicable, f.why_not.empty());
          EXPECT_EQ(l.why_not, f.why_not);
        }
        EXPECT_TRUE(seen) << f.name;
      }
      bool half = false;
      for (const Lever& l : levers) half |= l.name == kHalfContextLever;
      EXPECT_TRUE(half);
    }
  }
}

// Keys per channel over 64 tokens take int4_had's bytes, but only a pool whose blocks hold whole
// 64-token groups can store them: at any other block size the lever says what to change.
TEST(KvFormatLevers, KeysPer64TokensNeedABlockSizeThatHoldsAGroup) {
  EXPECT_EQ(kv_format_levers(KvDtype::kF16, KvDtype::kF16, 16)[5].why_not,
            "--block-size must be a multiple of 64 (it is 16)");
  EXPECT_TRUE(kv_format_levers(KvDtype::kF16, KvDtype::kF16, 128)[5].why_not.empty());
  // One rule for every per-channel lever: the 16-token ones at a block size of 8, none unpaged.
  EXPECT_EQ(kv_format_levers(KvDtype::kF16, KvDtype::kF16, 8)[2].why_not,
            "--block-size must be a multiple of 16 (it is 8)");
  for (const KvFormatLever& l : kv_format_levers(KvDtype::kF16, KvDtype::kF16, 0))
    EXPECT_TRUE(l.why_not.empty()) << l.name;
  EXPECT_EQ(kv_format_levers(KvDtype::kInt4Chan64, KvDtype::kInt4Had, 64)[5].why_not,
            "already int4_chan64/int4_had");
}

}  // namespace
}  // namespace kvs
