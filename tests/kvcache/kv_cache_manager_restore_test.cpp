// admit_restored (swap-in) and block_infos (/v1/kv): exact block ids, block size 4.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace kvs {
namespace {

constexpr SeqId S1{1}, S2{2}, S3{3};

std::vector<int32_t> iota_tokens(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<uint32_t> ids(std::span<const BlockId> blocks) {
  std::vector<uint32_t> v;
  for (BlockId b : blocks) v.push_back(b.value);
  return v;
}

using Ids = std::vector<uint32_t>;

#define EXPECT_INTEGRITY(m)                      \
  do {                                           \
    const Status st_ = (m).check_integrity();    \
    EXPECT_TRUE(st_.is_ok()) << st_.to_string(); \
  } while (0)

TEST(KvCacheManagerRestore, TakesFreshBlocksAndCommitsEveryToken) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 8, .block_size = 4});
  const auto toks = iota_tokens(100, 10);  // 2 full blocks + 2 tokens
  ASSERT_TRUE(m.admit_restored(S1, toks, "").is_ok());
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1, 2}));
  EXPECT_EQ(m.num_tokens(S1), 10u);
  EXPECT_EQ(m.num_committed(S1), 10u);
  EXPECT_INTEGRITY(m);
  // Restoring counts no prefix query.
  EXPECT_EQ(m.stats().prefix_query_tokens, 0u);
  // The full blocks are prefix-cache entries: a new prompt with the same start hits them.
  std::vector<BlockCopy> copies;
  auto prompt = iota_tokens(100, 9);
  auto cached = m.admit(S2, prompt, "", &copies);
  ASSERT_TRUE(cached.is_ok());
  EXPECT_EQ(*cached, 8u);
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 1}));
  EXPECT_INTEGRITY(m);
  // Decoding continues from the restored state.
  ASSERT_TRUE(m.append_slots(S1, 1, &copies).is_ok());
  m.commit_tokens(S1, std::vector<int32_t>{7});
  EXPECT_EQ(m.num_committed(S1), 11u);
  m.free(S1);
  m.free(S2);
  EXPECT_INTEGRITY(m);
  EXPECT_EQ(m.stats().blocks_in_use, 0u);
}

TEST(KvCacheManagerRestore, FailsWithoutChangesWhenThePoolIsShort) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 2, .block_size = 4});
  const Status st = m.admit_restored(S1, iota_tokens(0, 9), "t").status();
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.contains(S1));
  EXPECT_INTEGRITY(m);
  EXPECT_TRUE(m.admit_restored(S1, iota_tokens(0, 8), "t").is_ok());
  EXPECT_EQ(m.admit_restored(S1, iota_tokens(0, 1), "t").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(m.admit_restored(S3, {}, "t").status().code(), StatusCode::kInvalidArgument);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManagerRestore, BlockInfosReportStateOwnerAndFill) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 6, .block_size = 4});
  ASSERT_TRUE(m.admit_restored(S1, iota_tokens(0, 6), "a").is_ok());   // blocks 0 (full), 1 (2)
  ASSERT_TRUE(m.admit_restored(S2, iota_tokens(50, 4), "b").is_ok());  // block 2 (full)
  m.free(S2);                                                          // 2 -> cached-free
  const auto infos = m.block_infos();
  ASSERT_EQ(infos.size(), 6u);
  EXPECT_EQ(infos[0].state, BlockState::kInUse);
  EXPECT_EQ(infos[0].refcount, 1u);
  EXPECT_EQ(infos[0].filled, 4u);
  EXPECT_EQ(infos[1].filled, 2u);
  EXPECT_EQ(infos[2].state, BlockState::kCachedFree);
  EXPECT_EQ(infos[2].filled, 4u);
  const auto tenants = m.tenant_stats();
  EXPECT_EQ(tenants[infos[0].tenant].cache_salt, "a");
  EXPECT_EQ(tenants[infos[2].tenant].cache_salt, "b");
  EXPECT_EQ(infos[3].state, BlockState::kFree);
  EXPECT_EQ(infos[3].filled, 0u);
}

}  // namespace
}  // namespace kvs
