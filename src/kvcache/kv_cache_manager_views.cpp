// KvCacheManager's read-only views: counters and statistics, the block map and the integrity
// check (the mutations are in kv_cache_manager.cpp; the per-sequence queries and the step inputs
// in sequence_block_tables.cpp).
#include <algorithm>

#include "kvcache/kv_cache_manager.h"

namespace kvs {

KvCacheCounters KvCacheManager::counters() const {
  KvCacheCounters c;
  c.num_blocks = config_.num_blocks;
  c.block_size = config_.block_size;
  c.blocks_free = pool_.num_free();
  c.blocks_cached_free = pool_.num_cached_free();
  c.blocks_in_use = pool_.num_in_use();
  const TenantCounters& totals = tenants_->totals();
  c.prefix_query_tokens = totals.query_tokens;
  c.prefix_hit_tokens = totals.hit_tokens;
  c.prefix_hit_block_tokens = totals.hit_block_tokens;
  c.evictions = pool_.num_evictions();
  c.cow_copies = cow_copies_;
  c.num_sequences = static_cast<uint32_t>(tables_.size());
  c.num_tenants = num_tenants();
  return c;
}

std::vector<BlockInfo> KvCacheManager::block_infos() const {
  const uint32_t bs = config_.block_size;
  std::vector<BlockInfo> out(config_.num_blocks);
  for (uint32_t b = 0; b < config_.num_blocks; ++b) {
    const BlockId id{b};
    out[b].state = pool_.state(id);
    out[b].refcount = pool_.refcount(id);
    out[b].tenant = pool_.owner(id).value;
    out[b].group = block_group_[b];
    if (out[b].state == BlockState::kCachedFree) out[b].filled = bs;
    if (tiers_ && cache_->contains(id)) out[b].tier_key = tiers_->meta(id).key;
  }
  // A shared block is filled as far as its fullest user has appended.
  for (const auto& [sid, s] : tables_.all()) {
    for (const BlockTable& table : s.tables) {
      const std::span<const BlockId> blocks = table.blocks();
      const uint32_t n = table.num_tokens();
      for (uint32_t j = 0; j < blocks.size(); ++j) {
        if (!blocks[j].is_valid()) continue;
        const uint32_t in_block = std::min<uint32_t>(bs, n > j * bs ? n - j * bs : 0);
        out[blocks[j].value].filled = std::max(out[blocks[j].value].filled, in_block);
      }
    }
  }
  return out;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats st;
  static_cast<KvCacheCounters&>(st) = counters();
  st.usage = static_cast<double>(st.blocks_in_use) / st.num_blocks;
  st.prefix_hit_rate = st.prefix_query_tokens == 0
                           ? 0
                           : static_cast<double>(st.prefix_hit_tokens) / st.prefix_query_tokens;
  st.allocated_slots = uint64_t{st.blocks_in_use} * st.block_size;
  uint64_t used = 0;
  for (const BlockInfo& b : block_infos())
    if (b.state == BlockState::kInUse) used += b.filled;
  st.unfilled_slots = st.allocated_slots - used;
  st.fragmentation =
      st.allocated_slots == 0 ? 0 : static_cast<double>(st.unfilled_slots) / st.allocated_slots;
  return st;
}

std::vector<TenantStats> KvCacheManager::tenant_stats() const {
  std::vector<TenantStats> out;
  for (uint32_t t = 0; t < tenants_->num_slots(); ++t) {
    if (!tenants_->is_live(t)) continue;
    const TenantId id{t};
    const TenantCounters& c = tenants_->counters(id);
    out.push_back(TenantStats{.id = t,
                              .cache_salt = tenants_->salt(id),
                              .prefix_query_tokens = c.query_tokens,
                              .prefix_hit_tokens = c.hit_tokens,
                              .prefix_hit_block_tokens = c.hit_block_tokens,
                              .blocks_held = pool_.tenant_held(id),
                              .blocks_cached_free = pool_.tenant_cached_free(id),
                              .blocks_evicted = pool_.tenant_evicted(id)});
  }
  return out;
}

Status KvCacheManager::check_integrity() const {
  const uint32_t bs = config_.block_size;
  std::vector<uint32_t> refs(config_.num_blocks, 0);
  KVS_RETURN_IF_ERROR(tables_.check_integrity(config_.num_blocks, &refs));
  std::vector<uint32_t> tenant_sequences(tenants_->num_slots(), 0);
  std::vector<SeqId> live;
  for (const auto& [id, s] : tables_.all()) {
    const std::string name = "sequence " + std::to_string(id.value);
    if (s.tenant.value >= tenants_->num_slots() || !tenants_->is_live(s.tenant.value))
      return internal_error(name + ": unknown tenant");
    ++tenant_sequences[s.tenant.value];
    if (config_.enable_prefix_caching && std::min(s.num_committed, s.cacheable_tokens) >= bs &&
        !s.last_ref.is_valid()) {
      return internal_error(name + ": full blocks committed but no chain position");
    }
    for (uint32_t g = 0; g < num_groups(); ++g) {
      const BlockTable& table = s.tables[g];
      const std::string where = name + ", group " + std::to_string(g);
      for (BlockId b : table.blocks()) {
        if (b.is_valid() && pool_.state(b) == BlockState::kInUse && !(pool_.owner(b) == s.tenant))
          return internal_error(where + ": uses a block of another tenant");
      }
      // Only the last block may be partly filled; a write must never go to a cached block.
      if (table.partial_tokens() != 0 && cache_->contains(table.block(table.num_blocks() - 1))) {
        return internal_error(where + ": partly filled last block is in the prefix cache");
      }
    }
    live.push_back(id);
  }
  KVS_RETURN_IF_ERROR(in_flight_.check_integrity(live));
  if (!recent_.check_integrity()) return internal_error("recent-window slots: inconsistent");
  if (!sink_.check_integrity())
    return internal_error("the attention sink's start-token table: inconsistent");
  for (SeqId id : live)
    if (recent_.num_slots() > 0 && recent_.slot_of(id) < 0)
      return internal_error("sequence " + std::to_string(id.value) + ": no recent-window slot");
  KVS_RETURN_IF_ERROR(tenants_->check_integrity(tenant_sequences));
  KVS_RETURN_IF_ERROR(pool_.check_integrity(refs));
  KVS_RETURN_IF_ERROR(cache_->check_integrity());
  if (tiers_) {
    KVS_RETURN_IF_ERROR(tiers_->check_integrity([&](BlockId b) { return cache_->contains(b); }));
  }
  return Status::ok();
}

}  // namespace kvs
