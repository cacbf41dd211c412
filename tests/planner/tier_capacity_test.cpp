// tier_capacity: the planner's count of blocks the disk tier holds matches what a real DiskTier
// writes into that many bytes, and the per-format rows follow kv_geometry.
#include "planner/tier_capacity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "kvcache/kv_pool_plan.h"
#include "planner/catalog.h"
#include "tiers/disk_tier.h"
#include "tiers/kv_offload_config.h"

namespace kvs {
namespace {

TEST(TierCapacityTest, DiskBlocksMatchWhatTheDiskTierWrites) {
  constexpr uint64_t kBlockBytes = 5000;
  constexpr uint32_t kBs = 4;
  for (uint64_t disk : {uint64_t{1000}, uint64_t{5200}, uint64_t{60000}, uint64_t{123456}}) {
    const uint64_t n = disk_tier_blocks(disk, kBlockBytes, kBs, 4);
    char tmpl[] = "/tmp/kvs-tier-capacity-XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    {
      auto t = DiskTier::open({.dir = dir,
                               .capacity_bytes = disk,
                               .ns = {.block_size = kBs, .block_bytes = kBlockBytes},
                               .extent_blocks = 4});
      ASSERT_TRUE(t.is_ok());
      std::vector<uint8_t> bytes(kBlockBytes, 1);
      const std::vector<int32_t> tokens(kBs, 3);
      // Full extents of 4, then the rest as one extent: exactly n blocks fit, none evicted.
      for (uint64_t k = 0; k < n; ++k) {
        (*t)->add({.key = k + 1, .parent_key = k, .salt_check = 0}, tokens, bytes.data());
      }
      ASSERT_TRUE((*t)->flush(10));
      const DiskTierCounters c = (*t)->counters();
      EXPECT_EQ(c.blocks, n) << disk;
      EXPECT_EQ(c.blocks_evicted, 0u) << disk;
      EXPECT_LE(c.used_bytes, disk);
      // One more block does not fit in what is left.
      EXPECT_LT(disk - c.used_bytes, extent_header_size(1, kBs) + kBlockBytes + kExtentMacBytes);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(TierCapacityTest, RowsFollowTheBytesPerTokenOfEachFormat) {
  auto model = load_catalog_model("SmolLM2-135M");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const auto rows = plan_tier_capacity(*model, 1, 16, uint64_t{1} << 30, 0);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].dtype, KvDtype::kF16);
  EXPECT_EQ(rows[0].bytes_per_token, 23040u);  // 30 x 2 x 3 x 64 x 2
  EXPECT_EQ(rows[0].host_tokens, (uint64_t{1} << 30) / (23040 * 16) * 16);
  for (const TierCapacityRow& r : rows) EXPECT_EQ(r.disk_tokens, 0u);
}

// The planner and the engine size the host tier with one rule (host_tier_blocks): whole blocks,
// at most kMaxPoolBlocks. The planner used to divide without the cap, promising host tokens the
// engine cannot hold once the memory holds more than 2^31 blocks.
TEST(TierCapacityTest, HostBlocksAreTheEnginesHostTierBlocks) {
  EXPECT_EQ(host_tier_blocks(1000, 100), 10u);
  EXPECT_EQ(host_tier_blocks(99, 100), 0u);
  EXPECT_EQ(host_tier_blocks(~uint64_t{0}, 1), kMaxPoolBlocks);
  auto model = load_catalog_model("SmolLM2-135M");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const uint64_t huge = uint64_t{1} << 60;
  for (const TierCapacityRow& r : plan_tier_capacity(*model, 1, 16, huge, 0)) {
    EXPECT_EQ(r.host_blocks, host_tier_blocks(huge, r.block_bytes)) << kv_dtype_name(r.dtype);
    EXPECT_EQ(r.host_blocks, kMaxPoolBlocks) << kv_dtype_name(r.dtype);
    EXPECT_EQ(r.host_tokens, kMaxPoolBlocks * 16);
  }
}

TEST(TierCapacityTest, OneRowPerFormatOfTheTableButF32AndTheKeysOnlyOnes) {
  auto model = load_catalog_model("SmolLM2-135M");
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const auto rows = plan_tier_capacity(*model, 1, 16, uint64_t{1} << 30, uint64_t{1} << 30);
  std::vector<KvDtype> want;
  for (const KvDtype d : all_kv_dtypes())
    if (d != KvDtype::kF32 && !kv_dtype_per_channel(d)) want.push_back(d);
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].dtype, want[i]);
  EXPECT_EQ(rows.back().dtype, KvDtype::kQ8_0Had);
}

}  // namespace
}  // namespace kvs
