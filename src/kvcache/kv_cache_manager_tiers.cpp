// KvCacheManager's side of the lower tiers (config.tier_keys), through its TierBridge
// (tier_bridge.h): the tier identities of a prompt's blocks (the chain a lookup walks down the
// tiers), blocks loaded from a tier put back into the cache, and the cached blocks written down
// at shutdown. The tiers themselves (policy, stores, transfers) are in src/tiers/; this side moves
// no byte either.
#include "kvcache/kv_cache_manager.h"

namespace kvs {

std::vector<TierBlockMeta> KvCacheManager::tier_chain(std::span<const int32_t> prompt,
                                                      std::string_view cache_salt,
                                                      uint32_t max_blocks) const {
  KVS_CHECK_MSG(tiers_ != nullptr, "tier_chain without tier keys");
  return tiers_->chain(prompt, cache_salt, max_blocks);
}

Result<std::vector<BlockId>> KvCacheManager::import_blocks(std::span<const int32_t> prompt,
                                                           std::string_view cache_salt,
                                                           uint32_t first_block,
                                                           std::span<const TierBlockMeta> metas,
                                                           uint32_t keep_free) {
  KVS_CHECK_MSG(tiers_ != nullptr, "import_blocks without tier keys");
  const uint32_t bs = config_.block_size;
  const uint32_t n = static_cast<uint32_t>(metas.size());
  if (n == 0 || uint64_t{first_block + n} * bs >= prompt.size())
    return invalid_argument("import_blocks: blocks outside the prompt");
  const TenantId t = tenants_->get_or_add(cache_salt);
  Match m;
  lookup(prompt, t, &m);
  if (m.hit_blocks != first_block)
    return invalid_argument("import_blocks: the cached chain is not " +
                            std::to_string(first_block) + " blocks long");
  std::vector<BlockId> hits;
  for (BlockId b : m.blocks[0])
    if (pool_.state(b) == BlockState::kCachedFree) hits.push_back(b);
  if (pool_.available_for(t, hits) < n + keep_free)
    return resource_exhausted("import_blocks: no room");
  // Pin the chain so that taking the new blocks cannot evict it.
  for (BlockId b : m.blocks[0]) pool_.add_ref(b);
  std::vector<BlockId> out;
  uint64_t key = m.last_key;
  BlockRef ref = m.last_ref;
  for (uint32_t i = 0; i < n; ++i) {
    const std::span<const int32_t> tokens = prompt.subspan(uint64_t{first_block + i} * bs, bs);
    const std::optional<BlockId> b = pool_.allocate(t);
    KVS_CHECK_MSG(b.has_value(), "import_blocks: allocation failed after the check");
    take_block(*b, 0);
    const uint64_t k = hash_fn_(key, tokens);
    const std::optional<BlockId> existing = cache_->insert(*b, k, key, ref, t, tokens);
    if (existing) {  // cannot happen: the chain ended at first_block
      pool_.release(*b);
      break;
    }
    pool_.set_keyed(*b);
    tiers_->on_cached(*b, metas[i], tokens, /*chain_start=*/first_block + i == 0,
                      /*computed=*/false);
    out.push_back(*b);
    key = k;
    ref = cache_->ref(*b);
  }
  // Tails first into the LRU, as free() does; then the pinned chain.
  for (size_t i = out.size(); i-- > 0;) pool_.release(out[i]);
  for (size_t i = m.blocks[0].size(); i-- > 0;) pool_.release(m.blocks[0][i]);
  return out;
}

std::vector<BlockId> KvCacheManager::cached_blocks() const {
  std::vector<BlockId> out;
  for (uint32_t b = 0; b < config_.num_blocks; ++b)
    if (cache_->contains(BlockId{b})) out.push_back(BlockId{b});
  return out;
}

}  // namespace kvs
