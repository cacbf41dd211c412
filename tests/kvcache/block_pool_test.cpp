// BlockPool and PrefixCache on their own: exact ids, list order, integrity failures.
#include <gtest/gtest.h>

#include <vector>

#include "kvcache/block_hash.h"
#include "kvcache/block_pool.h"
#include "kvcache/prefix_cache.h"

namespace kvs {
namespace {

constexpr TenantId T0{0}, T1{1};

std::vector<int32_t> block_tokens(int32_t first) {
  return {first, first + 1, first + 2, first + 3};
}

// Caches block b as a first block with the given tokens (key = its first token).
void cache_block(PrefixCache& cache, BlockPool& pool, BlockId b, int32_t first) {
  const auto tokens = block_tokens(first);
  ASSERT_FALSE(cache.insert(b, static_cast<uint64_t>(first), 0, BlockRef{}, pool.owner(b), tokens)
                   .has_value());
  pool.set_keyed(b);
}

TEST(BlockPool, AllocatesAscendingAndFreesFifo) {
  PrefixCache cache(4, 4);
  BlockPool pool(4, 0, &cache);
  pool.add_tenant();
  EXPECT_EQ(pool.allocate(T0)->value, 0u);
  EXPECT_EQ(pool.allocate(T0)->value, 1u);
  pool.release(BlockId{0});
  EXPECT_EQ(pool.state(BlockId{0}), BlockState::kFree);
  EXPECT_EQ(pool.allocate(T0)->value, 2u);
  EXPECT_EQ(pool.allocate(T0)->value, 3u);
  EXPECT_EQ(pool.allocate(T0)->value, 0u);
  EXPECT_FALSE(pool.allocate(T0).has_value());
  EXPECT_EQ(pool.available_for(T0), 0u);
  const std::vector<uint32_t> refs = {1, 1, 1, 1};
  EXPECT_TRUE(pool.check_integrity(refs).is_ok());
}

TEST(BlockPool, CachedFreeBlocksAreTouchedAndEvictedInLruOrder) {
  PrefixCache cache(4, 4);
  BlockPool pool(4, 0, &cache);
  pool.add_tenant();
  for (uint32_t i = 0; i < 4; ++i) ASSERT_EQ(pool.allocate(T0)->value, i);
  for (uint32_t i = 0; i < 4; ++i) cache_block(cache, pool, BlockId{i}, 10 * (int32_t(i) + 1));
  pool.add_ref(BlockId{2});                                      // refcount 2
  for (uint32_t i : {3u, 2u, 1u, 0u}) pool.release(BlockId{i});  // LRU: 3, 1, 0 (2 still used)
  EXPECT_EQ(pool.num_cached_free(), 3u);
  EXPECT_EQ(pool.refcount(BlockId{2}), 1u);
  pool.add_ref(BlockId{1});  // a hit: leaves the LRU
  EXPECT_EQ(pool.state(BlockId{1}), BlockState::kInUse);
  pool.release(BlockId{1});  // back at the tail: LRU 3, 0, 1
  EXPECT_EQ(pool.allocate(T0)->value, 3u);
  EXPECT_FALSE(cache.contains(BlockId{3}));
  EXPECT_EQ(pool.allocate(T0)->value, 0u);
  EXPECT_EQ(pool.allocate(T0)->value, 1u);
  EXPECT_EQ(pool.num_evictions(), 3u);
  EXPECT_EQ(cache.size(), 1u);  // block 2, still in use
  const std::vector<uint32_t> refs = {1, 1, 1, 1};
  EXPECT_TRUE(pool.check_integrity(refs).is_ok());
}

TEST(BlockPool, IntegrityCheckNamesTheBrokenInvariant) {
  PrefixCache cache(4, 4);
  BlockPool pool(4, 0, &cache);
  pool.add_tenant();
  const BlockId b = *pool.allocate(T0);
  std::vector<uint32_t> refs = {1, 0, 0, 0};
  EXPECT_TRUE(pool.check_integrity(refs).is_ok());
  refs[0] = 2;  // the manager counts a reference the pool does not know of
  const Status st = pool.check_integrity(refs);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("block 0 refcount 1"), std::string::npos) << st.message();
  // A block in the hash index that the pool does not know as keyed.
  refs[0] = 1;
  ASSERT_FALSE(cache.insert(b, 5, 0, BlockRef{}, T0, block_tokens(1)).has_value());
  EXPECT_NE(pool.check_integrity(refs).message().find("hash index"), std::string::npos);
}

TEST(BlockPool, QuotaAvailabilityIsExact) {
  PrefixCache cache(8, 4);
  BlockPool pool(8, 3, &cache);
  pool.add_tenant();
  pool.add_tenant();
  EXPECT_EQ(pool.available_for_new_tenant(), 3u);
  for (uint32_t i = 0; i < 3; ++i) ASSERT_EQ(pool.allocate(T0)->value, i);
  EXPECT_EQ(pool.available_for(T0), 0u);
  EXPECT_FALSE(pool.allocate(T0).has_value());
  cache_block(cache, pool, BlockId{0}, 1);
  pool.release(BlockId{0});  // T0: 2 in use + 1 cached-free = 3 held
  EXPECT_EQ(pool.available_for(T0), 1u);
  const BlockId excluded[] = {BlockId{0}};
  EXPECT_EQ(pool.available_for(T0, excluded), 0u);
  EXPECT_EQ(pool.available_for(T1), 3u);
  EXPECT_EQ(pool.allocate(T0)->value, 0u);  // recycles its own block
  EXPECT_EQ(pool.tenant_evicted(T0), 1u);
  EXPECT_EQ(pool.tenant_held(T0), 3u);
}

TEST(PrefixCache, DeduplicatesAndBumpsGenerationOnErase) {
  PrefixCache cache(4, 4);
  const auto t = block_tokens(1);
  EXPECT_FALSE(cache.insert(BlockId{0}, 9, 0, BlockRef{}, T0, t).has_value());
  // Same key, parent, tenant and tokens: the existing entry is returned.
  const auto dup = cache.insert(BlockId{1}, 9, 0, BlockRef{}, T0, t);
  ASSERT_TRUE(dup.has_value());
  EXPECT_EQ(dup->value, 0u);
  EXPECT_FALSE(cache.contains(BlockId{1}));
  // Same key, other tokens: a second entry under the key.
  EXPECT_FALSE(cache.insert(BlockId{2}, 9, 0, BlockRef{}, T0, block_tokens(5)).has_value());
  EXPECT_EQ(cache.find(9, BlockRef{}, T0, t)->value, 0u);
  EXPECT_EQ(cache.find(9, BlockRef{}, T0, block_tokens(5))->value, 2u);
  EXPECT_FALSE(cache.find(9, BlockRef{}, T1, t).has_value());
  const BlockRef before = cache.ref(BlockId{0});
  cache.erase(BlockId{0});
  EXPECT_NE(cache.ref(BlockId{0}), before);
  EXPECT_FALSE(cache.find(9, BlockRef{}, T0, t).has_value());
  EXPECT_TRUE(cache.check_integrity().is_ok());
}

TEST(PrefixCache, PartialMatchPicksTheLongestSharedPrefix) {
  PrefixCache cache(4, 4);
  const uint64_t parent_key = 77;
  const BlockRef parent{BlockId{3}, 0};
  ASSERT_FALSE(cache.insert(BlockId{0}, 1, parent_key, parent, T0, std::vector<int32_t>{5, 6, 7, 8})
                   .has_value());
  ASSERT_FALSE(cache.insert(BlockId{1}, 2, parent_key, parent, T0, std::vector<int32_t>{5, 6, 9, 9})
                   .has_value());
  ASSERT_FALSE(
      cache.insert(BlockId{2}, 3, parent_key, BlockRef{}, T0, std::vector<int32_t>{5, 6, 9, 1})
          .has_value());
  const std::vector<int32_t> rest = {5, 6, 9, 1};
  auto m = cache.find_partial(parent_key, parent, T0, rest, 3);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->block.value, 1u);  // block 2 shares more but has another parent
  EXPECT_EQ(m->num_tokens, 3u);
  m = cache.find_partial(parent_key, parent, T0, rest, 2);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->num_tokens, 2u);
  EXPECT_FALSE(cache.find_partial(parent_key, parent, T0, std::vector<int32_t>{6}, 3).has_value());
  EXPECT_FALSE(cache.find_partial(parent_key, parent, T1, rest, 3).has_value());
}

TEST(BlockHash, ChainsParentKeysAndSeparatesExtraKeys) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  EXPECT_NE(default_block_hash(1, t), default_block_hash(2, t));
  EXPECT_EQ(default_block_hash(1, t), default_block_hash(1, t));
  const uint64_t extra = extra_keys_hash(0, KvDtype::kF16, KvDtype::kF16);
  EXPECT_NE(root_block_key(extra, ""), root_block_key(extra, "a"));
  EXPECT_NE(extra, extra_keys_hash(0, KvDtype::kF16, KvDtype::kBF16));
  EXPECT_NE(extra, extra_keys_hash(1, KvDtype::kF16, KvDtype::kF16));
}
}  // namespace
}  // namespace kvs
