// Admission details of the KV cache manager (block size 4, exact ids): admission is all or
// nothing, identical prompts admitted back to back share instead of duplicating (in-flight
// prefixes), hits are also counted in whole blocks, and idle tenants are forgotten.
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

KvCacheConfig config(uint32_t num_blocks) {
  return KvCacheConfig{.num_blocks = num_blocks, .block_size = 4};
}

TEST(KvCacheAdmission, AdmitAppendsTheFirstChunkAllOrNothing) {
  KvCacheManager m(config(3));
  std::vector<BlockCopy> copies;
  // 10 tokens, budget 6: 6 slots appended in 2 blocks.
  ASSERT_EQ(*m.admit(S1, iota_tokens(1, 10), "", &copies, 6), 0u);
  EXPECT_EQ(m.num_tokens(S1), 6u);
  EXPECT_EQ(m.num_committed(S1), 0u);
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1}));
  EXPECT_INTEGRITY(m);
  // A second prompt that needs 2 blocks for its chunk while 1 is left: refused, nothing changes.
  const KvCacheStats before = m.stats();
  const Result<uint32_t> r = m.admit(S2, iota_tokens(50, 8), "other", &copies, 8);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.contains(S2));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.stats().blocks_in_use, before.blocks_in_use);
  EXPECT_EQ(m.stats().prefix_query_tokens, before.prefix_query_tokens);
  EXPECT_EQ(m.tenant_stats().size(), 1u);  // no tenant registered for the refused salt
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheAdmission, ARefusedPartialCopyQueuesNothing) {
  KvCacheManager m(config(4));
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S1, iota_tokens(1, 8), "", &copies, 8), 0u);  // blocks 0, 1
  m.commit_tokens(S1, iota_tokens(1, 8));
  m.free(S1);                                                        // both cached-free
  ASSERT_EQ(*m.admit(S3, iota_tokens(100, 8), "", &copies, 8), 0u);  // blocks 2, 3
  // [1..4] hits block 0, [5, 6] would be copied from block 1; the chunk of 6 more tokens needs
  // 2 blocks beyond the hit (copy destination + 1) but only block 1 (the copy's own source) is
  // obtainable: the copy is dropped and the admission refused, with no copy left queued.
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 70, 71, 72, 73, 74, 75};
  const Result<uint32_t> r = m.admit(S2, prompt, "", &copies, 12);
  EXPECT_FALSE(r.is_ok());
  EXPECT_TRUE(copies.empty());
  EXPECT_FALSE(m.contains(S2));
  EXPECT_EQ(m.stats().cow_copies, 0u);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheAdmission, IdenticalPromptWaitsForTheBlocksInFlight) {
  KvCacheManager m(config(16));
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> prompt = iota_tokens(1, 10);  // 2 full blocks + 2 tokens
  ASSERT_EQ(*m.admit(S1, prompt, "", &copies, 10), 0u);
  // Admitted but not computed: the next admission of the same prompt would duplicate it.
  AdmitPlan plan = m.plan_admit(prompt, "");
  EXPECT_TRUE(plan.prefix_in_flight);
  EXPECT_EQ(plan.cached_tokens, 0u);
  // Another tenant's identical prompt is a different chain: not in flight for it.
  EXPECT_FALSE(m.plan_admit(prompt, "b").prefix_in_flight);
  EXPECT_INTEGRITY(m);
  // After the forward pass commits the prompt, it is a hit on both full blocks.
  m.commit_tokens(S1, prompt);
  plan = m.plan_admit(prompt, "");
  EXPECT_FALSE(plan.prefix_in_flight);
  EXPECT_EQ(plan.cached_tokens, 8u);
  ASSERT_EQ(*m.admit(S2, prompt, "", &copies, 10), 8u);
  EXPECT_EQ(ids(m.block_table(S2)).front(), ids(m.block_table(S1)).front());
  EXPECT_EQ(m.refcount(m.block_table(S1)[0]), 2u);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheAdmission, InFlightEntriesEndWithTheirSequence) {
  KvCacheManager m(config(16));
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> prompt = iota_tokens(1, 12);
  ASSERT_TRUE(m.admit(S1, prompt, "", &copies, 4).is_ok());  // chunked: 1 of 3 blocks
  m.commit_tokens(S1, std::span(prompt).first(4));
  // Block 0 is committed (cached); block 1 is still in flight for S1.
  AdmitPlan plan = m.plan_admit(prompt, "");
  EXPECT_EQ(plan.cached_tokens, 4u);
  EXPECT_TRUE(plan.prefix_in_flight);
  EXPECT_INTEGRITY(m);
  // A preempted (freed) sequence computes nothing: its entries go with it.
  m.free(S1);
  plan = m.plan_admit(prompt, "");
  EXPECT_FALSE(plan.prefix_in_flight);
  EXPECT_EQ(plan.cached_tokens, 4u);
  EXPECT_INTEGRITY(m);
  // A forked child does not own its parent's entries.
  ASSERT_TRUE(m.admit(S2, prompt, "", &copies, 8).is_ok());
  m.commit_tokens(S2, std::span(prompt).subspan(4, 8));
  ASSERT_TRUE(m.fork(S2, S3).is_ok());
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheAdmission, PrefixCachingOffRegistersNothing) {
  KvCacheConfig c = config(16);
  c.enable_prefix_caching = false;
  KvCacheManager m(c);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.admit(S1, iota_tokens(1, 10), "", &copies, 10).is_ok());
  EXPECT_FALSE(m.plan_admit(iota_tokens(1, 10), "").prefix_in_flight);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheAdmission, HitsAreAlsoCountedInWholeBlocks) {
  KvCacheManager m(config(8));
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.admit(S1, iota_tokens(1, 8), "", &copies, 8).is_ok());
  m.commit_tokens(S1, iota_tokens(1, 8));
  // 6 tokens reused: block 0 whole, 2 slots of block 1 copied.
  ASSERT_EQ(*m.admit(S2, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 9}, "", &copies, 0), 6u);
  const KvCacheStats st = m.stats();
  EXPECT_EQ(st.prefix_hit_tokens, 6u);
  EXPECT_EQ(st.prefix_hit_block_tokens, 4u);
  EXPECT_EQ(m.tenant_stats()[0].prefix_hit_block_tokens, 4u);
}

TEST(KvCacheAdmission, IdleTenantsAreForgottenAndTheirSlotsReused) {
  KvCacheManager m(config(4));
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.admit(S1, iota_tokens(1, 4), "a", &copies, 4).is_ok());
  m.commit_tokens(S1, iota_tokens(1, 4));
  ASSERT_TRUE(m.admit(S2, iota_tokens(1, 3), "b", &copies, 3).is_ok());
  m.free(S2);  // b holds nothing (no full block was committed)
  EXPECT_EQ(m.num_tenants(), 2u);
  EXPECT_EQ(m.forget_idle_tenants(100.0, 10.0), 0u);  // b is idle from now on
  EXPECT_EQ(m.forget_idle_tenants(105.0, 10.0), 0u);
  EXPECT_EQ(m.forget_idle_tenants(110.0, 10.0), 1u);  // b: idle 10 s
  EXPECT_EQ(m.num_tenants(), 1u);
  EXPECT_INTEGRITY(m);
  // a still runs a sequence; once freed its block stays cached-free, so a is kept.
  m.free(S1);
  EXPECT_EQ(m.forget_idle_tenants(200.0, 10.0), 0u);
  EXPECT_EQ(m.forget_idle_tenants(300.0, 10.0), 0u);
  EXPECT_EQ(m.num_tenants(), 1u);
  // A new salt takes b's slot, with fresh counters; a's cached block is still found.
  ASSERT_TRUE(m.admit(S3, iota_tokens(1, 5), "c", &copies, 5).is_ok());
  EXPECT_EQ(m.num_tenants(), 2u);
  for (const TenantStats& t : m.tenant_stats()) {
    if (t.cache_salt == "c") {
      EXPECT_EQ(t.prefix_query_tokens, 5u);
    }
  }
  EXPECT_EQ(m.stats().prefix_query_tokens, 4u + 3u + 5u);  // totals survive forgetting
  EXPECT_EQ(m.plan_admit(iota_tokens(1, 5), "a").cached_tokens, 4u);
  EXPECT_INTEGRITY(m);
}

}  // namespace
}  // namespace kvs

namespace kvs {
namespace {

// Blocks that end past a sequence's cacheable tokens (with a recent-token window: its floor) are
// its own: never prefix-cache entries, never in flight for another prompt to wait on.
TEST(KvCacheAdmission, BlocksPastTheCacheableTokensAreNotCached) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 8, .block_size = 4});
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  ASSERT_EQ(*m.admit(SeqId{1}, prompt, "", &copies, 4, UINT32_MAX, 4), 0u);
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 9);
  EXPECT_TRUE(m.plan_admit(head, "").prefix_in_flight);  // block 0 is being computed
  m.commit_tokens(SeqId{1}, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
  // Block 0 is cached; block 1 (tokens 4-7) is not waited for: it will never be an entry.
  const AdmitPlan plan = m.plan_admit(head, "");
  EXPECT_FALSE(plan.prefix_in_flight);
  EXPECT_EQ(plan.cached_tokens, 4u);
  ASSERT_TRUE(m.append_slots(SeqId{1}, 9, &copies).is_ok());
  m.commit_tokens(SeqId{1}, std::vector<int32_t>(prompt.begin() + 4, prompt.end()));
  EXPECT_TRUE(m.check_integrity().is_ok());
  m.free(SeqId{1});
  // The same prompt again hits the first block only.
  EXPECT_EQ(*m.admit(SeqId{2}, prompt, "", &copies, 16), 4u);
  EXPECT_TRUE(m.check_integrity().is_ok());
  // Nothing cacheable at all: no chain position, and integrity holds.
  const std::vector<int32_t> other = {50, 51, 52, 53, 54, 55};
  ASSERT_EQ(*m.admit(SeqId{3}, other, "", &copies, 16, UINT32_MAX, 0), 0u);
  m.commit_tokens(SeqId{3}, other);
  EXPECT_TRUE(m.check_integrity().is_ok());
  m.free(SeqId{3});
  EXPECT_EQ(*m.admit(SeqId{4}, other, "", &copies, 16), 0u);
}

}  // namespace
}  // namespace kvs
