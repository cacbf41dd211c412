#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <cmath>

namespace kvs {

namespace {

uint32_t resolve_quota(const KvCacheConfig& c) {
  uint32_t q = c.tenant_quota_blocks;
  if (c.tenant_quota_fraction > 0) {
    const double f = std::floor(c.tenant_quota_fraction * c.num_blocks);
    const uint32_t fq =
        std::max<uint32_t>(1, static_cast<uint32_t>(std::min<double>(f, c.num_blocks)));
    q = q == 0 ? fq : std::min(q, fq);
  }
  return q;
}

uint32_t ceil_div(uint64_t a, uint32_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      cache_(std::make_unique<PrefixCache>(config.num_blocks, config.block_size)),
      pool_(config.num_blocks, resolve_quota(config), cache_.get()),
      tenants_(
          std::make_unique<TenantRegistry>(extra_keys_hash(config.model_fingerprint, config.k_dtype,
                                                           config.v_dtype, config.hash_seed),
                                           pool_)),
      hash_fn_(&default_block_hash),
      tables_(config.block_size, config.group_windows),
      block_group_(config.num_blocks, 0),
      recent_(config.recent_window_slots),
      sink_(config.attention_sink_entries) {
  KVS_CHECK_MSG(config.attention_sink_entries == 0 ||
                    config.attention_sink_entries == config.recent_window_slots,
                "KvCacheConfig: the attention sink has one entry per recent-window slot");
  KVS_CHECK_MSG(config.num_blocks > 0 && config.block_size > 0,
                "KvCacheConfig needs num_blocks > 0 and block_size > 0");
  KVS_CHECK_MSG(!config.group_windows.empty() && config.group_windows.size() < 256,
                "KvCacheConfig needs 1..255 layer groups");
  // Prefix caching chains through group 0's blocks, which only a full group keeps.
  if (config_.group_windows[0] != 0) config_.enable_prefix_caching = false;
  KVS_CHECK_MSG(!config_.tier_keys || (config_.enable_prefix_caching && num_groups() == 1),
                "lower tiers need prefix caching and a single layer group");
  if (config_.tier_keys) {
    tiers_ = std::make_unique<TierBridge>(
        config_.num_blocks, config_.block_size,
        TierBridgeConfig{
            .secrets = config_.tier_secrets,
            .tier_namespace = tier_namespace(config_.model_fingerprint, config_.k_dtype,
                                             config_.v_dtype, config_.block_size),
            .log_completed = config_.log_completed_blocks,
            .log_events = config_.log_events});
    cache_->set_tier_bridge(tiers_.get());
  }
}

void KvCacheManager::set_hash_function_for_testing(BlockHashFn fn) {
  KVS_CHECK_MSG(cache_->size() == 0, "hash function changed while blocks are cached");
  hash_fn_ = fn;
}

void KvCacheManager::take_block(BlockId b, uint32_t group) {
  block_group_[b.value] = static_cast<uint8_t>(group);
}

uint32_t KvCacheManager::held_from(uint32_t group, uint32_t next) const {
  return first_held_block(window(group), next, config_.block_size);
}

void KvCacheManager::lookup(std::span<const int32_t> prompt, std::optional<TenantId> tenant,
                            Match* m, uint32_t max_cached_tokens) const {
  const uint32_t groups = num_groups();
  m->hit_blocks = 0;
  m->blocks.assign(groups, {});
  m->first_block.assign(groups, 0);
  m->partial.reset();
  m->last_ref = BlockRef{};
  m->last_key = tenant ? tenants_->root_key(*tenant) : 0;
  if (!config_.enable_prefix_caching || !tenant || prompt.empty()) return;
  const TenantId t = *tenant;
  const uint32_t bs = config_.block_size;
  // The last prompt token is always recomputed so that its logits exist.
  const uint32_t max_cached = std::min(static_cast<uint32_t>(prompt.size()) - 1, max_cached_tokens);
  // Group 0: the chain from the root.
  std::vector<BlockId> anchor;
  std::vector<uint64_t> keys;
  std::vector<BlockRef> refs;
  uint64_t key = m->last_key;
  BlockRef ref;
  for (uint32_t pos = 0; pos + bs <= max_cached; pos += bs) {
    const std::span<const int32_t> tokens = prompt.subspan(pos, bs);
    key = hash_fn_(key, tokens);
    const std::optional<BlockId> hit = cache_->find(key, ref, t, tokens);
    if (!hit) break;
    ref = cache_->ref(*hit);
    anchor.push_back(*hit);
    keys.push_back(key);
    refs.push_back(ref);
  }
  uint32_t hit = static_cast<uint32_t>(anchor.size());
  // The other groups: block i of group g hangs off group 0's block i. Lower the hit until every
  // group has the blocks it needs for it (a lower hit moves a sliding group's window down, so
  // repeat until nothing changes).
  std::vector<std::vector<std::optional<BlockId>>> found(groups);
  auto group_block = [&](uint32_t g, uint32_t i) -> std::optional<BlockId> {
    if (found[g].size() <= i) found[g].resize(anchor.size());
    if (!found[g][i]) {
      const std::span<const int32_t> tokens = prompt.subspan(uint64_t{i} * bs, bs);
      found[g][i] = cache_->find(group_block_key(keys[i], g), refs[i], t, tokens)
                        .value_or(BlockId::invalid());
    }
    return found[g][i]->is_valid() ? *found[g][i] : std::optional<BlockId>();
  };
  for (bool changed = true; changed && hit > 0;) {
    changed = false;
    for (uint32_t g = 1; g < groups && hit > 0; ++g) {
      for (uint32_t i = hit; i-- > held_from(g, hit * bs);) {
        if (!group_block(g, i)) {
          hit = i;  // a hit reaching past block i would need it
          changed = true;
          break;
        }
      }
    }
  }
  m->hit_blocks = hit;
  for (uint32_t g = 0; g < groups; ++g) {
    m->first_block[g] = held_from(g, hit * bs);
    for (uint32_t i = m->first_block[g]; i < hit; ++i)
      m->blocks[g].push_back(g == 0 ? anchor[i] : *group_block(g, i));
  }
  if (hit > 0) {
    m->last_key = keys[hit - 1];
    m->last_ref = refs[hit - 1];
  }
  if (groups > 1) return;
  // A cached child of the last matched position that shares a shorter prefix with the rest of
  // the prompt: copying its first p slots saves p tokens of prefill.
  const uint32_t pos = hit * bs;
  const std::span<const int32_t> rest =
      prompt.subspan(pos, std::min<size_t>(bs, prompt.size() - pos));
  m->partial =
      cache_->find_partial(m->last_key, m->last_ref, t, rest, std::min(bs - 1, max_cached - pos));
  // Per-channel keys: only whole groups (16 or 64 tokens). A group's minimum and step cover all
  // its rows, so the first p rows of another sequence's group are not what this sequence would
  // have written (their parameters saw rows it does not have); whole groups of the same tokens are.
  if (m->partial && kv_dtype_per_channel(config_.k_dtype)) {
    m->partial->num_tokens -= m->partial->num_tokens % kv_channel_group_tokens(config_.k_dtype);
    if (m->partial->num_tokens == 0) m->partial.reset();
  }
}

AdmitPlan KvCacheManager::plan_admit(std::span<const int32_t> prompt, std::string_view cache_salt,
                                     uint32_t max_cached_tokens) const {
  const std::optional<TenantId> tenant = tenants_->find(cache_salt);
  Match m;
  lookup(prompt, tenant, &m, max_cached_tokens);
  const uint32_t bs = config_.block_size;
  AdmitPlan plan;
  plan.cached_tokens = m.full_tokens(bs) + (m.partial ? m.partial->num_tokens : 0);
  plan.cached_blocks = m.hit_blocks;
  const uint32_t total = ceil_div(prompt.size(), bs);
  for (uint32_t g = 0; g < num_groups(); ++g) {
    const uint32_t need = total - m.hit_blocks;
    plan.blocks_needed += window(g) == 0 ? need : std::min(need, ceil_div(window(g), bs) + 1);
  }
  // The next full block of the prompt: is another sequence computing it right now?
  if (tenant && config_.enable_prefix_caching && !in_flight_.empty() &&
      uint64_t{m.hit_blocks + 1} * bs <= prompt.size()) {
    const uint64_t key = hash_fn_(m.last_key, prompt.subspan(uint64_t{m.hit_blocks} * bs, bs));
    plan.prefix_in_flight = in_flight_.contains(key);
  }
  if (!tenant) {
    plan.fits = plan.blocks_needed <= pool_.available_for_new_tenant();
    return plan;
  }
  // Hits on cached-free blocks take them out of the evictable set.
  std::vector<BlockId> taken;
  for (const auto& blocks : m.blocks)
    for (BlockId b : blocks)
      if (pool_.state(b) == BlockState::kCachedFree) taken.push_back(b);
  plan.fits = plan.blocks_needed <= pool_.available_for(*tenant, taken);
  return plan;
}

uint32_t KvCacheManager::available_blocks(std::string_view cache_salt) const {
  const std::optional<TenantId> t = tenants_->find(cache_salt);
  return t ? pool_.available_for(*t) : pool_.available_for_new_tenant();
}

Result<uint32_t> KvCacheManager::admit(SeqId seq, std::span<const int32_t> prompt,
                                       std::string_view cache_salt, std::vector<BlockCopy>* copies,
                                       uint32_t chunk_budget, uint32_t max_cached_tokens,
                                       uint32_t cacheable_tokens) {
  if (prompt.empty()) return invalid_argument("admit: empty prompt");
  if (tables_.contains(seq)) return invalid_argument("admit: sequence already exists");
  if (recent_.num_slots() > 0 && recent_.num_free() == 0)
    return resource_exhausted("admit: every recent-window slot is held");
  const std::optional<TenantId> tenant = tenants_->find(cache_salt);
  Match m;
  lookup(prompt, tenant, &m, max_cached_tokens);
  const uint32_t bs = config_.block_size;
  const uint32_t groups = num_groups();
  const uint32_t full = m.full_tokens(bs);
  // Blocks obtainable once the hits are referenced (cached-free hits leave the evictable set),
  // keeping the partial copy's source too when there is one.
  std::vector<BlockId> taken;
  for (const auto& blocks : m.blocks)
    for (BlockId b : blocks)
      if (pool_.state(b) == BlockState::kCachedFree) taken.push_back(b);
  const uint32_t hits_only =
      tenant ? pool_.available_for(*tenant, taken) : pool_.available_for_new_tenant();
  bool partial = m.partial.has_value() && copies != nullptr;
  uint32_t available = hits_only;
  if (partial && pool_.state(m.partial->block) == BlockState::kCachedFree) {
    taken.push_back(m.partial->block);
    available = pool_.available_for(*tenant, taken);
  }
  // The partial copy's destination and the chunk's blocks beyond the hits, in every group.
  const auto blocks_for = [&](uint32_t cached) {
    const uint32_t chunk = std::min<uint32_t>(chunk_budget, prompt.size() - cached);
    return groups * (ceil_div(uint64_t{cached} + chunk, bs) - m.hit_blocks);
  };
  if (partial && blocks_for(full + m.partial->num_tokens) > available) {
    partial = false;  // no room for the copy: recompute those tokens instead
    available = hits_only;
  }
  const uint32_t cached = full + (partial ? m.partial->num_tokens : 0);
  const uint32_t chunk = std::min<uint32_t>(chunk_budget, prompt.size() - cached);
  const uint32_t need = blocks_for(cached);
  if (need > available) {
    return resource_exhausted("admit: " + std::to_string(need) + " blocks needed, " +
                              std::to_string(available) + " available");
  }
  const TenantId t = tenant ? *tenant : tenants_->get_or_add(cache_salt);
  if (!tenant) m.last_key = tenants_->root_key(t);  // nothing matched: the chain starts at the root
  SeqBlocks s(t, bs, groups);
  for (uint32_t g = 0; g < groups; ++g) {
    BlockTable& table = s.tables[g];
    for (uint32_t i = 0; i < m.first_block[g]; ++i) table.push_block(BlockId::invalid());
    for (BlockId b : m.blocks[g]) {
      pool_.add_ref(b);
      take_block(b, g);
      table.push_block(b);
    }
  }
  if (partial) {
    // Pin the source so that allocating the destination cannot evict it.
    const BlockId src = m.partial->block;
    pool_.add_ref(src);
    const std::optional<BlockId> dst = pool_.allocate(t);
    KVS_CHECK_MSG(dst.has_value(), "admit: allocation failed after the availability check");
    pool_.release(src);
    take_block(*dst, 0);
    const uint32_t p = m.partial->num_tokens;
    copies->push_back(BlockCopy{src, *dst, p});
    ++cow_copies_;
    s.tables[0].push_block(*dst);
    s.partial_tokens.assign(prompt.begin() + full, prompt.begin() + full + p);
  }
  s.num_committed = cached;
  s.cacheable_tokens = cacheable_tokens;
  s.last_key = m.last_key;
  s.last_ref = m.last_ref;
  if (tiers_) {
    s.salt_check = tiers_->salt_check(cache_salt);
    s.last_tier_key =
        m.hit_blocks > 0 ? tiers_->meta(m.last_ref.block).key : tiers_->root_key(cache_salt);
    for (BlockId b : m.blocks[0]) tiers_->count_hit(b);
  }
  for (uint32_t g = 0; g < groups; ++g) {
    BlockTable& table = s.tables[g];
    table.add_tokens(cached);
    for (uint32_t i = table.num_blocks(); i < ceil_div(uint64_t{cached} + chunk, bs); ++i) {
      const std::optional<BlockId> b = pool_.allocate(t);
      KVS_CHECK_MSG(b.has_value(), "admit: allocation failed after the availability check");
      take_block(*b, g);
      table.push_block(*b);
    }
    table.add_tokens(chunk);
  }
  tenants_->count_lookup(t, prompt.size(), cached, full);
  tenants_->add_sequence(t);
  tables_.insert(seq, std::move(s));
  if (recent_.num_slots() > 0) (void)recent_.take(seq);  // checked free above
  if (config_.enable_prefix_caching) {
    register_in_flight(seq, prompt.first(std::min<size_t>(prompt.size(), cacheable_tokens)),
                       m.hit_blocks, m.last_key);
  }
  return cached;
}

void KvCacheManager::register_in_flight(SeqId seq, std::span<const int32_t> prompt,
                                        uint32_t first_block, uint64_t parent_key) {
  const uint32_t bs = config_.block_size;
  std::vector<uint64_t> keys;
  uint64_t key = parent_key;
  for (uint64_t b = first_block; (b + 1) * bs <= prompt.size(); ++b) {
    key = hash_fn_(key, prompt.subspan(b * bs, bs));
    keys.push_back(key);
  }
  in_flight_.register_chain(seq, keys);
}

namespace {
// A write into the partly filled last block must not be seen by its other users.
bool needs_cow(const BlockTable& table, const BlockPool& pool, uint32_t num_tokens) {
  return num_tokens > 0 && table.partial_tokens() != 0 &&
         pool.refcount(table.block(table.num_blocks() - 1)) > 1;
}
}  // namespace

uint32_t KvCacheManager::blocks_needed_to_append(SeqId seq, uint32_t num_tokens) const {
  const SeqBlocks& s = tables_.at(seq);
  uint32_t need = 0;
  for (const BlockTable& table : s.tables)
    need += table.blocks_to_add(num_tokens) + (needs_cow(table, pool_, num_tokens) ? 1 : 0);
  return need;
}

bool KvCacheManager::can_append(SeqId seq, uint32_t num_tokens) const {
  return blocks_needed_to_append(seq, num_tokens) <= pool_.available_for(tables_.at(seq).tenant);
}

void KvCacheManager::release_before(SeqBlocks& s, uint32_t group, uint32_t first_kept) {
  BlockTable& table = s.tables[group];
  for (uint32_t i = std::min(first_kept, table.num_blocks()); i-- > 0;) {
    const BlockId b = table.block(i);
    if (!b.is_valid()) break;  // released earlier, and so is everything before it
    pool_.release(b);
    table.set_block(i, BlockId::invalid());
  }
}

void KvCacheManager::release_out_of_window(SeqId seq) {
  SeqBlocks& s = tables_.at(seq);
  const uint32_t next = s.tables[0].num_tokens();
  for (uint32_t g = 1; g < num_groups(); ++g) release_before(s, g, held_from(g, next));
}

Status KvCacheManager::append_slots(SeqId seq, uint32_t num_tokens,
                                    std::vector<BlockCopy>* copies) {
  SeqBlocks* found = tables_.find(seq);
  if (found == nullptr) return invalid_argument("append_slots: unknown sequence");
  SeqBlocks& s = *found;
  // What this step can read of the sliding groups starts at the window before its first
  // position: everything before goes back to the pool first (the sequence only grows, so no
  // later step needs it either).
  release_out_of_window(seq);
  const uint32_t need = blocks_needed_to_append(seq, num_tokens);
  if (need > pool_.available_for(s.tenant)) {
    return resource_exhausted("append_slots: " + std::to_string(need) + " blocks needed, " +
                              std::to_string(pool_.available_for(s.tenant)) + " available");
  }
  // available_for is exact, so no allocation below can fail.
  for (uint32_t g = 0; g < num_groups(); ++g) {
    BlockTable& table = s.tables[g];
    if (needs_cow(table, pool_, num_tokens)) {
      KVS_CHECK_MSG(copies != nullptr, "append_slots needs a copy list for a shared block");
      const uint32_t last = table.num_blocks() - 1;
      const BlockId src = table.block(last);
      const std::optional<BlockId> dst = pool_.allocate(s.tenant);
      KVS_CHECK(dst.has_value());
      take_block(*dst, g);
      copies->push_back(BlockCopy{src, *dst, table.partial_tokens()});
      ++cow_copies_;
      pool_.release(src);  // still referenced by the other users
      table.set_block(last, *dst);
    }
    for (uint32_t i = 0, add = table.blocks_to_add(num_tokens); i < add; ++i) {
      const std::optional<BlockId> b = pool_.allocate(s.tenant);
      KVS_CHECK(b.has_value());
      take_block(*b, g);
      table.push_block(*b);
    }
    table.add_tokens(num_tokens);
  }
  return Status::ok();
}

void KvCacheManager::commit_full_block(SeqId seq, SeqBlocks& s, uint32_t block_index,
                                       std::span<const int32_t> tokens) {
  const BlockId b = s.tables[0].block(block_index);
  const uint64_t parent_key = s.last_key;
  const uint64_t key = hash_fn_(parent_key, tokens);
  KVS_DCHECK(block_index == 0 || s.last_ref.is_valid());
  KVS_CHECK_MSG(!cache_->contains(b), "a cached block is written again");
  in_flight_.on_committed(seq, key);
  const std::optional<BlockId> existing =
      cache_->insert(b, key, parent_key, s.last_ref, s.tenant, tokens);
  if (existing) {
    // Another sequence computed the same block first; chain later blocks to the cached one.
    s.last_ref = cache_->ref(*existing);
  } else {
    pool_.set_keyed(b);
    s.last_ref = cache_->ref(b);
  }
  s.last_key = key;
  if (tiers_) {
    const uint64_t tier_key = tier_block_key(s.last_tier_key, tokens);
    if (!existing) {
      tiers_->on_cached(
          b, {.key = tier_key, .parent_key = s.last_tier_key, .salt_check = s.salt_check}, tokens,
          /*chain_start=*/block_index == 0, /*computed=*/true);
    }
    s.last_tier_key = tier_key;
  }
  // The other groups' blocks at this position hang off group 0's block (its ref as parent).
  for (uint32_t g = 1; g < num_groups(); ++g) {
    const BlockId gb = s.tables[g].block(block_index);
    if (!gb.is_valid() || cache_->contains(gb)) continue;
    // Its own key as the "parent key" keeps it out of group 0's child buckets (partial matches).
    const uint64_t gkey = group_block_key(key, g);
    if (!cache_->insert(gb, gkey, gkey, s.last_ref, s.tenant, tokens)) pool_.set_keyed(gb);
  }
}

void KvCacheManager::commit_tokens(SeqId seq, std::span<const int32_t> tokens) {
  SeqBlocks& s = tables_.at(seq);
  KVS_CHECK_MSG(uint64_t{s.num_committed} + tokens.size() <= s.tables[0].num_tokens(),
                "commit_tokens beyond the appended slots");
  const uint32_t bs = config_.block_size;
  size_t i = 0;
  while (i < tokens.size()) {
    const size_t take = std::min<size_t>(bs - s.partial_tokens.size(), tokens.size() - i);
    s.num_committed += static_cast<uint32_t>(take);
    const bool cacheable = config_.enable_prefix_caching && s.num_committed <= s.cacheable_tokens;
    if (s.partial_tokens.empty() && take == bs) {
      // A whole block at once (prefill): no staging copy.
      if (cacheable) {
        commit_full_block(seq, s, s.num_committed / bs - 1, tokens.subspan(i, bs));
      }
    } else {
      s.partial_tokens.insert(s.partial_tokens.end(), tokens.begin() + i,
                              tokens.begin() + i + take);
      if (s.partial_tokens.size() == bs) {
        if (cacheable) {
          commit_full_block(seq, s, s.num_committed / bs - 1, s.partial_tokens);
        }
        s.partial_tokens.clear();
      }
    }
    i += take;
  }
  // Every appended slot is written: the next step starts at num_tokens, and the sliding groups'
  // blocks before its window go back to the pool now, so that the dry runs (can_append,
  // blocks_needed_to_append) see them as available.
  if (s.num_committed == s.tables[0].num_tokens() && num_groups() > 1) release_out_of_window(seq);
}

Status KvCacheManager::fork(SeqId parent, SeqId child) {
  const SeqBlocks* p = tables_.find(parent);
  if (p == nullptr) return invalid_argument("fork: unknown parent sequence");
  if (tables_.contains(child)) return invalid_argument("fork: child sequence already exists");
  if (p->num_committed != p->num_tokens()) {
    return invalid_argument("fork: parent has appended slots that are not committed");
  }
  if (recent_.num_slots() > 0 && recent_.num_free() == 0)
    return resource_exhausted("fork: every recent-window slot is held");
  SeqBlocks copy = *p;
  for (const BlockTable& table : copy.tables)
    for (BlockId b : table.blocks())
      if (b.is_valid()) pool_.add_ref(b);
  tenants_->add_sequence(copy.tenant);
  tables_.insert(child, std::move(copy));
  KVS_CHECK(recent_.fork(parent, child));  // a slot is free (checked above)
  return Status::ok();
}

Result<std::vector<BlockId>> KvCacheManager::admit_restored(SeqId seq,
                                                            std::span<const int32_t> tokens,
                                                            std::string_view cache_salt,
                                                            uint32_t chunk) {
  if (tokens.empty()) return invalid_argument("admit_restored: no tokens");
  if (tables_.contains(seq)) return invalid_argument("admit_restored: sequence already exists");
  if (recent_.num_slots() > 0 && recent_.num_free() == 0)
    return resource_exhausted("admit_restored: every recent-window slot is held");
  const uint32_t bs = config_.block_size;
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  // The restored blocks of every group, then the chunk's blocks beyond them.
  uint32_t need = 0;
  for (uint32_t g = 0; g < num_groups(); ++g)
    need += ceil_div(uint64_t{n} + chunk, bs) - held_from(g, n);
  const std::optional<TenantId> known = tenants_->find(cache_salt);
  const uint32_t available = known ? pool_.available_for(*known) : pool_.available_for_new_tenant();
  if (need > available) {
    return resource_exhausted("admit_restored: " + std::to_string(need) + " blocks needed, " +
                              std::to_string(available) + " available");
  }
  const TenantId t = known ? *known : tenants_->get_or_add(cache_salt);
  SeqBlocks s(t, bs, num_groups());
  s.last_key = tenants_->root_key(t);
  if (tiers_) {
    s.salt_check = tiers_->salt_check(cache_salt);
    s.last_tier_key = tiers_->root_key(cache_salt);
  }
  std::vector<BlockId> restored;
  for (uint32_t g = 0; g < num_groups(); ++g) {
    BlockTable& table = s.tables[g];
    const uint32_t first = held_from(g, n);
    for (uint32_t i = 0; i < ceil_div(n, bs); ++i) {
      if (i < first) {
        table.push_block(BlockId::invalid());
        continue;
      }
      const std::optional<BlockId> b = pool_.allocate(t);
      KVS_CHECK_MSG(b.has_value(), "admit_restored: allocation failed after the check");
      take_block(*b, g);
      table.push_block(*b);
      restored.push_back(*b);
    }
    table.add_tokens(n);
  }
  tenants_->add_sequence(t);
  tables_.insert(seq, std::move(s));
  if (recent_.num_slots() > 0) (void)recent_.take(seq);  // checked free above
  commit_tokens(seq, tokens);
  // The availability check above covered the chunk too (a fresh table needs no copy).
  const Status st = append_slots(seq, chunk, nullptr);
  KVS_CHECK_MSG(st.is_ok(), "admit_restored: append_slots failed after the check");
  return restored;
}

void KvCacheManager::free(SeqId seq) {
  SeqBlocks* found = tables_.find(seq);
  if (found == nullptr) return;
  SeqBlocks& s = *found;
  in_flight_.drop(seq);
  // Groups last to first, each last block to first: a chain's tail enters the LRU first and is
  // evicted before its parents (and other groups' blocks before group 0's they hang off).
  for (size_t g = s.tables.size(); g-- > 0;) {
    const std::span<const BlockId> blocks = s.tables[g].blocks();
    for (size_t i = blocks.size(); i-- > 0;)
      if (blocks[i].is_valid()) pool_.release(blocks[i]);
  }
  tenants_->remove_sequence(s.tenant);
  tables_.erase(seq);
  recent_.release(seq);
}

void KvCacheManager::adopt_start_rows(SeqId seq, int32_t first_token) {
  const int32_t slot = recent_.slot_of(seq);
  KVS_CHECK(has_attention_sink() && slot >= 0);
  start_row_copies_.push_back(
      {.slot = static_cast<uint32_t>(slot), .entry = sink_.adopt(first_token), .publish = false});
}

void KvCacheManager::publish_start_rows(SeqId seq, int32_t first_token) {
  const int32_t slot = recent_.slot_of(seq);
  KVS_CHECK(has_attention_sink() && slot >= 0);
  if (const std::optional<uint32_t> entry = sink_.publish(first_token))
    start_row_copies_.push_back(
        {.slot = static_cast<uint32_t>(slot), .entry = *entry, .publish = true});
}

void KvCacheManager::forward_done() {
  (void)recent_.take_changes();
  start_row_copies_.clear();
  sink_.rows_written();
}

uint32_t KvCacheManager::forget_idle_tenants(double now, double idle_seconds) {
  return tenants_->forget_idle(now, idle_seconds);
}

uint32_t KvCacheManager::num_tenants() const { return tenants_->size(); }

}  // namespace kvs
