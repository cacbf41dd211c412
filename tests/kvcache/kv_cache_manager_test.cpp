// Scenario tests of the KV cache manager: exact block ids and refcounts, step by step.
// Block size 4 throughout so the arithmetic stays visible; a fresh pool hands out ids 0, 1, 2...
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace kvs {
namespace {

constexpr SeqId S1{1}, S2{2}, S3{3}, S4{4};

std::vector<int32_t> iota_tokens(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<uint32_t> ids(std::span<const BlockId> blocks) {
  std::vector<uint32_t> v;
  for (BlockId b : blocks) v.push_back(b.value);
  return v;
}

using Ids = std::vector<uint32_t>;

KvCacheConfig small_config(uint32_t num_blocks = 8) {
  return KvCacheConfig{.num_blocks = num_blocks, .block_size = 4};
}

#define EXPECT_INTEGRITY(m)                      \
  do {                                           \
    const Status st_ = (m).check_integrity();    \
    EXPECT_TRUE(st_.is_ok()) << st_.to_string(); \
  } while (0)

// Admits `prompt`, appends slots for the uncached part and commits it: a whole prefill.
uint32_t prefill(KvCacheManager& m, SeqId s, const std::vector<int32_t>& prompt,
                 std::string_view salt = "", std::vector<BlockCopy>* copies = nullptr) {
  std::vector<BlockCopy> local;
  if (copies == nullptr) copies = &local;
  Result<uint32_t> cached = m.admit(s, prompt, salt, copies);
  EXPECT_TRUE(cached.is_ok());
  const uint32_t c = *cached;
  const uint32_t rest = static_cast<uint32_t>(prompt.size()) - c;
  EXPECT_TRUE(m.append_slots(s, rest, copies).is_ok());
  m.commit_tokens(s, std::span(prompt).subspan(c));
  return c;
}

TEST(KvCacheManager, AllocateAndAppendAcrossABlockBoundary) {
  KvCacheManager m(small_config());
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S1, iota_tokens(1, 6), "", &copies), 0u);
  EXPECT_TRUE(m.block_table(S1).empty());
  EXPECT_EQ(m.blocks_needed_to_append(S1, 6), 2u);
  ASSERT_TRUE(m.append_slots(S1, 6, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1}));
  EXPECT_EQ(m.refcount(BlockId{0}), 1u);
  EXPECT_EQ(m.refcount(BlockId{1}), 1u);
  EXPECT_EQ(m.slot(S1, 5), 1u * 4 + 1);
  m.commit_tokens(S1, iota_tokens(1, 6));
  EXPECT_EQ(m.num_committed(S1), 6u);
  EXPECT_INTEGRITY(m);

  // Two more fit in block 1; the third crosses into block 2.
  EXPECT_EQ(m.blocks_needed_to_append(S1, 2), 0u);
  EXPECT_EQ(m.blocks_needed_to_append(S1, 3), 1u);
  ASSERT_TRUE(m.append_slots(S1, 2, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1}));
  ASSERT_TRUE(m.append_slots(S1, 1, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1, 2}));
  EXPECT_EQ(m.num_tokens(S1), 9u);
  EXPECT_EQ(m.slot(S1, 8), 8u);
  EXPECT_TRUE(copies.empty());

  const KvCacheStats st = m.stats();
  EXPECT_EQ(st.blocks_in_use, 3u);
  EXPECT_EQ(st.blocks_free, 5u);
  EXPECT_EQ(st.allocated_slots, 12u);
  EXPECT_EQ(st.unfilled_slots, 3u);
  EXPECT_DOUBLE_EQ(st.fragmentation, 3.0 / 12);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, StepInputs) {
  KvCacheManager m(small_config());
  prefill(m, S1, iota_tokens(1, 6));    // blocks 0, 1
  prefill(m, S2, iota_tokens(100, 3));  // block 2
  ASSERT_TRUE(m.append_slots(S1, 1, nullptr).is_ok());
  ASSERT_TRUE(m.append_slots(S2, 1, nullptr).is_ok());
  StepInputs in;
  const StepRow rows[] = {{S1, 6, 1}, {S2, 0, 4}};
  m.build_step_inputs(rows, &in);
  EXPECT_EQ(in.max_blocks_per_seq, 2u);
  EXPECT_EQ(in.context_lens, (std::vector<uint32_t>{7, 4}));
  EXPECT_EQ(in.block_tables, (std::vector<uint32_t>{0, 1, 2, 0}));
  EXPECT_EQ(in.slot_mapping, (std::vector<int64_t>{6, 8, 9, 10, 11}));
}

TEST(KvCacheManager, SharesACachedPrefix) {
  KvCacheManager m(small_config());
  const auto a = iota_tokens(1, 9);
  EXPECT_EQ(prefill(m, S1, a), 0u);  // blocks 0, 1 full (cached), 2 partial
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1, 2}));

  const auto b = cat(iota_tokens(1, 8), {50, 51});
  const AdmitPlan plan = m.plan_admit(b, "");
  EXPECT_EQ(plan.cached_tokens, 8u);
  EXPECT_EQ(plan.blocks_needed, 1u);
  EXPECT_TRUE(plan.fits);
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S2, b, "", &copies), 8u);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 1}));
  EXPECT_EQ(m.refcount(BlockId{0}), 2u);
  EXPECT_EQ(m.refcount(BlockId{1}), 2u);
  EXPECT_EQ(m.refcount(BlockId{2}), 1u);
  ASSERT_TRUE(m.append_slots(S2, 2, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 1, 3}));
  m.commit_tokens(S2, std::vector<int32_t>{50, 51});
  EXPECT_INTEGRITY(m);

  const KvCacheStats st = m.stats();
  EXPECT_EQ(st.prefix_query_tokens, 19u);
  EXPECT_EQ(st.prefix_hit_tokens, 8u);
  EXPECT_EQ(st.blocks_in_use, 4u);
}

TEST(KvCacheManager, NeverCachesTheWholePrompt) {
  KvCacheManager m(small_config());
  prefill(m, S1, iota_tokens(1, 8));  // blocks 0, 1 both full and cached
  // The same 8 tokens again: block 0 is reused, and 3 of block 1's slots are copied so that
  // only the last token is recomputed.
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S2, iota_tokens(1, 8), "", &copies), 7u);
  EXPECT_EQ(copies, (std::vector<BlockCopy>{{BlockId{1}, BlockId{2}, 3}}));
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 2}));
  EXPECT_EQ(m.num_tokens(S2), 7u);
  ASSERT_TRUE(m.append_slots(S2, 1, &copies).is_ok());
  m.commit_tokens(S2, std::vector<int32_t>{8});
  // Block 2 now holds the same tokens as block 1: it stays uncached (block 1 is the entry).
  m.free(S2);
  EXPECT_EQ(m.block_state(BlockId{2}), BlockState::kFree);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, ForkSharesBlocksAndDivergesWithCopyOnWrite) {
  KvCacheManager m(small_config());
  prefill(m, S1, iota_tokens(1, 6));  // blocks 0 (full), 1 (2 tokens)
  ASSERT_TRUE(m.fork(S1, S2).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 1}));
  EXPECT_EQ(m.refcount(BlockId{0}), 2u);
  EXPECT_EQ(m.refcount(BlockId{1}), 2u);
  EXPECT_EQ(m.num_tokens(S2), 6u);
  EXPECT_INTEGRITY(m);

  // The first writer into the shared partial block gets a private copy.
  EXPECT_EQ(m.blocks_needed_to_append(S2, 1), 1u);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.append_slots(S2, 1, &copies).is_ok());
  EXPECT_EQ(copies, (std::vector<BlockCopy>{{BlockId{1}, BlockId{2}, 2}}));
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 2}));
  EXPECT_EQ(m.refcount(BlockId{1}), 1u);
  EXPECT_EQ(m.refcount(BlockId{2}), 1u);
  m.commit_tokens(S2, std::vector<int32_t>{70});

  // The parent is now the only user of block 1: it writes in place.
  copies.clear();
  EXPECT_EQ(m.blocks_needed_to_append(S1, 1), 0u);
  ASSERT_TRUE(m.append_slots(S1, 1, &copies).is_ok());
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(ids(m.block_table(S1)), (Ids{0, 1}));
  m.commit_tokens(S1, std::vector<int32_t>{80});
  EXPECT_EQ(m.stats().cow_copies, 1u);
  EXPECT_INTEGRITY(m);

  // Fork with uncommitted slots is refused.
  ASSERT_TRUE(m.append_slots(S1, 1, &copies).is_ok());
  EXPECT_EQ(m.fork(S1, S3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.fork(S4, S3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.fork(S2, S1).code(), StatusCode::kInvalidArgument);

  // A fork at a block boundary needs no copy: the next write opens a new block.
  KvCacheManager m2(small_config());
  prefill(m2, S1, iota_tokens(1, 4));  // block 0, full
  ASSERT_TRUE(m2.fork(S1, S2).is_ok());
  copies.clear();
  ASSERT_TRUE(m2.append_slots(S2, 1, &copies).is_ok());
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(ids(m2.block_table(S2)), (Ids{0, 1}));
  EXPECT_INTEGRITY(m2);
}

TEST(KvCacheManager, FreedBlocksStayCachedAndAreReused) {
  KvCacheManager m(small_config());
  const auto a = iota_tokens(1, 9);
  prefill(m, S1, a);  // 0, 1 cached; 2 partial
  m.free(S1);
  EXPECT_EQ(m.block_state(BlockId{0}), BlockState::kCachedFree);
  EXPECT_EQ(m.block_state(BlockId{1}), BlockState::kCachedFree);
  EXPECT_EQ(m.block_state(BlockId{2}), BlockState::kFree);
  KvCacheStats st = m.stats();
  EXPECT_EQ(st.blocks_free, 6u);
  EXPECT_EQ(st.blocks_cached_free, 2u);
  EXPECT_EQ(st.blocks_in_use, 0u);
  EXPECT_INTEGRITY(m);

  // A hit takes the cached-free blocks back out of the LRU.
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S2, a, "", &copies), 8u);
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 1}));
  EXPECT_EQ(m.block_state(BlockId{0}), BlockState::kInUse);
  EXPECT_EQ(m.refcount(BlockId{1}), 1u);
  // The free list is FIFO: fresh blocks first, then the freed block 2.
  ASSERT_TRUE(m.append_slots(S2, 1, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 1, 3}));
  st = m.stats();
  EXPECT_EQ(st.blocks_cached_free, 0u);
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, EvictsLeastRecentlyUsedChainTailsFirst) {
  KvCacheManager m(small_config(6));
  prefill(m, S1, iota_tokens(1, 8));    // blocks 0, 1
  prefill(m, S2, iota_tokens(100, 8));  // blocks 2, 3
  m.free(S1);                           // LRU: 1, 0
  m.free(S2);                           // LRU: 1, 0, 3, 2
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S3, iota_tokens(200, 16), "", &copies), 0u);
  // Blocks 4, 5 are free; then S1's tail (1), S1's head (0), S2's tail (3).
  EXPECT_EQ(m.blocks_needed_to_append(S3, 12), 3u);
  ASSERT_TRUE(m.append_slots(S3, 12, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{4, 5, 1}));
  EXPECT_EQ(m.stats().evictions, 1u);
  // S1's first block is still cached, its second is gone.
  EXPECT_EQ(m.plan_admit(cat(iota_tokens(1, 8), {9}), "").cached_tokens, 4u);
  ASSERT_TRUE(m.append_slots(S3, 4, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{4, 5, 1, 0}));
  EXPECT_EQ(m.plan_admit(cat(iota_tokens(1, 8), {9}), "").cached_tokens, 0u);
  EXPECT_EQ(m.plan_admit(cat(iota_tokens(100, 8), {9}), "").cached_tokens, 8u);
  EXPECT_EQ(m.stats().evictions, 2u);

  // A hit on S2's prefix takes 2 and 3 out of the LRU: nothing is left to evict.
  ASSERT_EQ(*m.admit(S4, cat(iota_tokens(100, 8), {9}), "", &copies), 8u);
  EXPECT_EQ(ids(m.block_table(S4)), (Ids{2, 3}));
  EXPECT_FALSE(m.can_append(S3, 1));
  const Status st = m.append_slots(S3, 1, &copies);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{4, 5, 1, 0}));  // unchanged
  EXPECT_EQ(m.num_tokens(S3), 16u);
  EXPECT_FALSE(m.plan_admit(iota_tokens(300, 3), "").fits);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, PlanCountsHitBlocksAsUnavailable) {
  KvCacheManager m(small_config(3));
  prefill(m, S1, iota_tokens(1, 8));  // blocks 0, 1
  m.free(S1);                         // both cached-free; block 2 free
  // Reusing both cached blocks leaves one block for the remaining 4 tokens.
  const AdmitPlan fits = m.plan_admit(iota_tokens(1, 12), "");
  EXPECT_EQ(fits.cached_tokens, 8u);
  EXPECT_EQ(fits.blocks_needed, 1u);
  EXPECT_TRUE(fits.fits);
  const AdmitPlan too_big = m.plan_admit(iota_tokens(1, 13), "");
  EXPECT_EQ(too_big.blocks_needed, 2u);
  EXPECT_FALSE(too_big.fits);
  EXPECT_EQ(m.available_blocks(""), 3u);
  EXPECT_EQ(m.stats().prefix_query_tokens, 8u);  // dry runs are not counted
}

TEST(KvCacheManager, PartialBlockCopyOnWritePrefixReuse) {
  KvCacheManager m(small_config());
  prefill(m, S1, iota_tokens(1, 8));  // blocks 0 [1..4], 1 [5..8]
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 90, 91, 92};
  EXPECT_EQ(m.plan_admit(b, "").cached_tokens, 6u);
  EXPECT_EQ(m.plan_admit(b, "").blocks_needed, 2u);
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S2, b, "", &copies), 6u);
  EXPECT_EQ(copies, (std::vector<BlockCopy>{{BlockId{1}, BlockId{2}, 2}}));
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 2}));
  EXPECT_EQ(m.refcount(BlockId{1}), 1u);  // the source is not shared, only copied
  EXPECT_EQ(m.num_tokens(S2), 6u);
  EXPECT_EQ(m.num_committed(S2), 6u);
  ASSERT_TRUE(m.append_slots(S2, 3, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{0, 2, 3}));
  m.commit_tokens(S2, std::vector<int32_t>{90, 91, 92});
  // Block 2 is now a full block [5, 6, 90, 91] under block 0 and is cached as such.
  EXPECT_EQ(m.plan_admit(cat(b, {93}), "").cached_tokens, 8u);
  EXPECT_EQ(m.stats().cow_copies, 1u);
  EXPECT_EQ(m.tenant_stats()[0].prefix_hit_tokens, 6u);
  EXPECT_INTEGRITY(m);

  // The copy source is pinned while its destination is allocated: with one cached-free source
  // and nothing else, the copy is skipped rather than evicting its own source.
  KvCacheManager t(small_config(2));
  prefill(t, S1, iota_tokens(1, 8));
  t.free(S1);  // LRU: 1, 0
  ASSERT_EQ(*t.admit(S2, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}, "", &copies), 4u);
  EXPECT_EQ(ids(t.block_table(S2)), (Ids{0}));
  EXPECT_INTEGRITY(t);
}

// Per-channel keys share a minimum and step per channel over 16 (64) tokens, so a partial copy
// takes whole groups only: the first rows of another sequence's group were quantized with rows
// this sequence does not have (the engine's outputs would change with what was cached).
TEST(KvCacheManager, PerChannelKeysCopyWholeGroupsOnly) {
  for (const KvDtype k : {KvDtype::kInt4Chan, KvDtype::kInt2Chan}) {
    KvCacheConfig c{.num_blocks = 8, .block_size = 48, .k_dtype = k};
    KvCacheManager m(c);
    prefill(m, S1, iota_tokens(1, 48));  // block 0, full
    std::vector<int32_t> b = iota_tokens(1, 40);
    b.push_back(900);  // shares 40 tokens: two whole groups (32) are copied, 8 recomputed
    EXPECT_EQ(m.plan_admit(b, "").cached_tokens, 32u);
    std::vector<BlockCopy> copies;
    ASSERT_EQ(*m.admit(S2, b, "", &copies), 32u);
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].num_tokens, 32u);
    // Less than one group shared: nothing is copied.
    std::vector<int32_t> d = iota_tokens(1, 10);
    d.push_back(901);
    EXPECT_EQ(m.plan_admit(d, "").cached_tokens, 0u);
    EXPECT_INTEGRITY(m);
  }
  // Groups of 64 tokens: 100 shared tokens copy one whole group.
  for (const KvDtype k : {KvDtype::kInt4Chan64, KvDtype::kInt2Chan64}) {
    KvCacheConfig c{.num_blocks = 8, .block_size = 128, .k_dtype = k};
    KvCacheManager m(c);
    prefill(m, S1, iota_tokens(1, 128));
    std::vector<int32_t> b = iota_tokens(1, 100);
    b.push_back(900);
    EXPECT_EQ(m.plan_admit(b, "").cached_tokens, 64u);
    std::vector<int32_t> d = iota_tokens(1, 60);
    d.push_back(901);
    EXPECT_EQ(m.plan_admit(d, "").cached_tokens, 0u);
    EXPECT_INTEGRITY(m);
  }
  // Other formats copy any number of tokens, as before.
  KvCacheManager f(KvCacheConfig{.num_blocks = 8, .block_size = 48});
  prefill(f, S1, iota_tokens(1, 48));
  std::vector<int32_t> b = iota_tokens(1, 40);
  b.push_back(900);
  EXPECT_EQ(f.plan_admit(b, "").cached_tokens, 40u);
}

TEST(KvCacheManager, CacheSaltIsolatesTenants) {
  KvCacheManager m(small_config());
  const auto p = iota_tokens(1, 9);
  prefill(m, S1, p, "alice");  // blocks 0, 1 cached under alice
  EXPECT_EQ(m.plan_admit(p, "bob").cached_tokens, 0u);
  EXPECT_EQ(m.plan_admit(p, "").cached_tokens, 0u);
  EXPECT_EQ(m.plan_admit(p, "alice").cached_tokens, 8u);
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S2, p, "bob", &copies), 0u);
  ASSERT_TRUE(m.append_slots(S2, 9, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{3, 4, 5}));
  m.commit_tokens(S2, p);
  ASSERT_EQ(*m.admit(S3, p, "alice", &copies), 8u);
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{0, 1}));
  ASSERT_EQ(*m.admit(S4, p, "bob", &copies), 8u);
  EXPECT_EQ(ids(m.block_table(S4)), (Ids{3, 4}));

  const std::vector<TenantStats> ts = m.tenant_stats();
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].cache_salt, "alice");
  EXPECT_EQ(ts[0].prefix_query_tokens, 18u);
  EXPECT_EQ(ts[0].prefix_hit_tokens, 8u);
  EXPECT_EQ(ts[0].blocks_held, 3u);
  EXPECT_EQ(ts[1].cache_salt, "bob");
  EXPECT_EQ(ts[1].blocks_held, 3u);
  EXPECT_INTEGRITY(m);

  // Different model or KV format: nothing matches either.
  KvCacheManager other(KvCacheConfig{.num_blocks = 8, .block_size = 4, .model_fingerprint = 7});
  EXPECT_EQ(extra_keys_hash(0, KvDtype::kF16, KvDtype::kF16) ==
                extra_keys_hash(7, KvDtype::kF16, KvDtype::kF16),
            false);
  EXPECT_NE(extra_keys_hash(0, KvDtype::kF16, KvDtype::kF16),
            extra_keys_hash(0, KvDtype::kFp8E4M3, KvDtype::kF16));
}

TEST(KvCacheManager, TenantQuotaRecyclesOwnBlocksThenRefuses) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 8, .block_size = 4, .tenant_quota_blocks = 4});
  prefill(m, S1, iota_tokens(1, 16), "a");  // blocks 0..3, all cached
  m.free(S1);                               // a holds 4 cached-free: LRU 3, 2, 1, 0
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S2, iota_tokens(100, 8), "a", &copies), 0u);
  EXPECT_EQ(m.available_blocks("a"), 4u);  // only its own cached blocks
  EXPECT_EQ(m.available_blocks("b"), 4u);  // 4 free, capped by the quota
  // At its quota, a recycles its own LRU blocks (chain tail first), not the 4 free ones.
  ASSERT_TRUE(m.append_slots(S2, 8, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{3, 2}));
  EXPECT_EQ(m.tenant_stats()[0].blocks_evicted, 2u);
  ASSERT_TRUE(m.append_slots(S2, 8, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{3, 2, 1, 0}));
  // Nothing of its own left to recycle: refused, although the pool has 4 free blocks.
  EXPECT_FALSE(m.can_append(S2, 1));
  EXPECT_EQ(m.append_slots(S2, 1, &copies).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.tenant_stats()[0].blocks_held, 4u);
  // Another tenant still gets the free blocks.
  ASSERT_EQ(*m.admit(S3, iota_tokens(300, 2), "b", &copies), 0u);
  ASSERT_TRUE(m.append_slots(S3, 2, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{4}));
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, FairEvictionPrefersTenantsOverTheirShare) {
  // Quota 6 of 8; with two active tenants the fair share is 4.
  KvCacheManager m(KvCacheConfig{.num_blocks = 8, .block_size = 4, .tenant_quota_blocks = 6});
  prefill(m, S1, iota_tokens(1, 8), "b");     // blocks 0, 1
  prefill(m, S2, iota_tokens(100, 24), "a");  // blocks 2..7
  m.free(S1);                                 // LRU: 1, 0
  m.free(S2);                                 // LRU: 1, 0, 7, 6, 5, 4, 3, 2
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S3, iota_tokens(500, 4), "b", &copies), 0u);
  ASSERT_TRUE(m.append_slots(S3, 4, &copies).is_ok());
  // The global LRU head is b's block 1, but a holds 6 > 4: a's LRU block goes first.
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{7}));
  ASSERT_TRUE(m.append_slots(S3, 8, &copies).is_ok());
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{7, 6, 1}));  // a at 4 = share: back to plain LRU
  const std::vector<TenantStats> ts = m.tenant_stats();
  EXPECT_EQ(ts[0].blocks_evicted, 1u);  // b
  EXPECT_EQ(ts[1].blocks_evicted, 2u);  // a
  EXPECT_EQ(ts[1].blocks_held, 4u);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, QuotaFraction) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 10, .block_size = 4, .tenant_quota_fraction = 0.3});
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S1, iota_tokens(1, 2), "a", &copies), 0u);
  EXPECT_EQ(m.available_blocks("a"), 3u);
  EXPECT_TRUE(m.append_slots(S1, 12, &copies).is_ok());
  EXPECT_EQ(m.append_slots(S1, 1, &copies).code(), StatusCode::kResourceExhausted);
}

TEST(KvCacheManager, PrefixCachingCanBeDisabled) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 8, .block_size = 4, .enable_prefix_caching = false});
  prefill(m, S1, iota_tokens(1, 9));
  EXPECT_EQ(m.plan_admit(iota_tokens(1, 9), "").cached_tokens, 0u);
  m.free(S1);
  EXPECT_EQ(m.stats().blocks_free, 8u);
  EXPECT_EQ(prefill(m, S2, iota_tokens(1, 9)), 0u);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, SurvivesAMove) {
  KvCacheManager a(small_config(2));
  prefill(a, S1, iota_tokens(1, 8));
  a.free(S1);
  KvCacheManager m = std::move(a);
  prefill(m, S2, iota_tokens(100, 4));  // evicts through the moved pool into the moved cache
  EXPECT_EQ(m.stats().evictions, 1u);
  EXPECT_INTEGRITY(m);
}

TEST(KvCacheManager, RejectsBadAdmits) {
  KvCacheManager m(small_config());
  std::vector<BlockCopy> copies;
  EXPECT_EQ(m.admit(S1, {}, "", &copies).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.admit(S1, iota_tokens(1, 3), "", &copies).is_ok());
  EXPECT_EQ(m.admit(S1, iota_tokens(1, 3), "", &copies).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(m.append_slots(S2, 1, &copies).code(), StatusCode::kInvalidArgument);
  m.free(S2);  // unknown: no-op
  EXPECT_INTEGRITY(m);
}

// Same last block, different parents: with every key colliding, only the stored tokens and the
// parent identity tell the blocks apart.
uint64_t constant_hash(uint64_t, std::span<const int32_t>) { return 42; }

TEST(KvCacheManager, CollidingKeysNeverReturnWrongBlocks) {
  KvCacheManager m(small_config(16));
  m.set_hash_function_for_testing(&constant_hash);
  const auto x = iota_tokens(1, 4), y = iota_tokens(5, 4), z = iota_tokens(9, 4);
  prefill(m, S1, cat(x, y));  // blocks 0 [x], 1 [y]
  prefill(m, S2, cat(z, y));  // blocks 2 [z], 3 [y] (other parent)
  EXPECT_EQ(ids(m.block_table(S2)), (Ids{2, 3}));
  std::vector<BlockCopy> copies;
  ASSERT_EQ(*m.admit(S3, cat(cat(z, y), {0}), "", &copies), 8u);
  EXPECT_EQ(ids(m.block_table(S3)), (Ids{2, 3}));
  ASSERT_EQ(*m.admit(S4, cat(cat(x, y), {0}), "", &copies), 8u);
  EXPECT_EQ(ids(m.block_table(S4)), (Ids{0, 1}));
  // x then z: the [z] block exists, but not as a child of [x].
  EXPECT_EQ(m.plan_admit(cat(cat(x, z), {0}), "").cached_tokens, 4u);
  // Different salt, same tokens, same (constant) key: no hit.
  EXPECT_EQ(m.plan_admit(cat(cat(x, y), {0}), "other").cached_tokens, 0u);
  EXPECT_INTEGRITY(m);

  // A parent evicted and its id re-used for other tokens cannot lead to its old children.
  // S2 computes [x][y] concurrently with S1, so its [x] is a duplicate and its cached [y] hangs
  // under S1's block 0; then block 0 is evicted and re-keyed as the 5th block of S3.
  KvCacheManager e(small_config(8));
  e.set_hash_function_for_testing(&constant_hash);
  const auto xy0 = cat(cat(x, y), {0});
  ASSERT_EQ(*e.admit(S1, xy0, "", &copies), 0u);
  ASSERT_EQ(*e.admit(S2, xy0, "", &copies), 0u);
  ASSERT_TRUE(e.append_slots(S1, 9, &copies).is_ok());  // 0, 1, 2
  ASSERT_TRUE(e.append_slots(S2, 9, &copies).is_ok());  // 3, 4, 5
  e.commit_tokens(S1, x);                               // [x] = block 0
  e.commit_tokens(S2, xy0);  // block 3 duplicates block 0; [y] = block 4 under block 0
  EXPECT_EQ(e.plan_admit(xy0, "").cached_tokens, 8u);
  e.free(S1);  // 0 cached-free; 2, 1 free
  const auto t = iota_tokens(1000, 20);
  prefill(e, S3, t);
  EXPECT_EQ(ids(e.block_table(S3)), (Ids{6, 7, 2, 1, 0}));
  EXPECT_EQ(e.stats().evictions, 1u);
  // Block 0 now ends T; block 4 still names block 0 as its parent, but of an older generation.
  EXPECT_EQ(e.plan_admit(cat(cat(t, y), {0}), "").cached_tokens, 20u);
  EXPECT_INTEGRITY(e);
}

TEST(FlatIndex, InsertFindEraseWithCollidingHomes) {
  FlatIndex idx(64);
  for (uint64_t k = 0; k < 64; ++k) idx.set(k << 40, static_cast<uint32_t>(k));
  EXPECT_EQ(idx.size(), 64u);
  for (uint64_t k = 0; k < 64; k += 2) idx.erase(k << 40);
  for (uint64_t k = 0; k < 64; ++k) {
    const auto v = idx.find(k << 40);
    if (k % 2 == 0) {
      EXPECT_FALSE(v.has_value()) << k;
    } else {
      ASSERT_TRUE(v.has_value()) << k;
      EXPECT_EQ(*v, k);
    }
  }
}

}  // namespace
}  // namespace kvs
