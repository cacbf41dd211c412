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

// The result of a prefix lookup: full-block hits, then maybe a partial match in the next block.
struct KvCacheManager::Match {
  std::vector<BlockId> blocks;  // full cached blocks, in order
  uint64_t last_key = 0;        // key of the last matched full block (root key if none)
  BlockRef last_ref;            // that block (invalid = root)
  std::optional<PrefixCache::PartialMatch> partial;
  [[nodiscard]] uint32_t full_tokens(uint32_t block_size) const {
    return static_cast<uint32_t>(blocks.size()) * block_size;
  }
};

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      extra_key_(extra_keys_hash(config.model_fingerprint, config.k_dtype, config.v_dtype,
                                 config.hash_seed)),
      cache_(std::make_unique<PrefixCache>(config.num_blocks, config.block_size)),
      pool_(config.num_blocks, resolve_quota(config), cache_.get()),
      hash_fn_(&default_block_hash) {
  KVS_CHECK_MSG(config.num_blocks > 0 && config.block_size > 0,
                "KvCacheConfig needs num_blocks > 0 and block_size > 0");
}

void KvCacheManager::set_hash_function_for_testing(BlockHashFn fn) {
  KVS_CHECK_MSG(cache_->size() == 0, "hash function changed while blocks are cached");
  hash_fn_ = fn;
}

std::optional<TenantId> KvCacheManager::find_tenant(std::string_view salt) const {
  const auto it = tenant_index_.find(salt);
  if (it == tenant_index_.end()) return std::nullopt;
  return TenantId{it->second};
}

TenantId KvCacheManager::tenant_for(std::string_view salt) {
  if (const std::optional<TenantId> t = find_tenant(salt)) return *t;
  uint32_t index = 0;
  if (!free_tenant_slots_.empty()) {
    index = free_tenant_slots_.back();
    free_tenant_slots_.pop_back();
    tenant_salts_[index] = std::string(salt);
    tenant_root_keys_[index] = root_block_key(extra_key_, salt);
    tenant_counters_[index] = TenantCounters{};
    pool_.reset_tenant(TenantId{index});
  } else {
    index = static_cast<uint32_t>(tenant_salts_.size());
    tenant_salts_.emplace_back(salt);
    tenant_root_keys_.push_back(root_block_key(extra_key_, salt));
    tenant_counters_.emplace_back();
    pool_.add_tenant();
  }
  tenant_index_.emplace(std::string(salt), index);
  return TenantId{index};
}

uint64_t KvCacheManager::root_key(TenantId t) const { return tenant_root_keys_[t.value]; }

void KvCacheManager::lookup(std::span<const int32_t> prompt, TenantId t, bool tenant_known,
                            Match* m) const {
  m->blocks.clear();
  m->partial.reset();
  m->last_ref = BlockRef{};
  m->last_key = tenant_known ? root_key(t) : 0;
  if (!config_.enable_prefix_caching || !tenant_known || prompt.empty()) return;
  const uint32_t bs = config_.block_size;
  // The last prompt token is always recomputed so that its logits exist.
  const uint32_t max_cached = static_cast<uint32_t>(prompt.size()) - 1;
  uint32_t pos = 0;
  while (pos + bs <= max_cached) {
    const std::span<const int32_t> tokens = prompt.subspan(pos, bs);
    const uint64_t key = hash_fn_(m->last_key, tokens);
    const std::optional<BlockId> hit = cache_->find(key, m->last_ref, t, tokens);
    if (!hit) break;
    m->blocks.push_back(*hit);
    m->last_key = key;
    m->last_ref = cache_->ref(*hit);
    pos += bs;
  }
  // A cached child of the last matched position that shares a shorter prefix with the rest of
  // the prompt: copying its first p slots saves p tokens of prefill.
  const std::span<const int32_t> rest =
      prompt.subspan(pos, std::min<size_t>(bs, prompt.size() - pos));
  m->partial =
      cache_->find_partial(m->last_key, m->last_ref, t, rest, std::min(bs - 1, max_cached - pos));
}

AdmitPlan KvCacheManager::plan_admit(std::span<const int32_t> prompt,
                                     std::string_view cache_salt) const {
  const std::optional<TenantId> tenant = find_tenant(cache_salt);
  const bool known = tenant.has_value();
  const TenantId t = tenant.value_or(TenantId{});
  Match m;
  lookup(prompt, t, known, &m);
  const uint32_t bs = config_.block_size;
  AdmitPlan plan;
  const uint32_t full = static_cast<uint32_t>(m.blocks.size());
  plan.cached_tokens = full * bs + (m.partial ? m.partial->num_tokens : 0);
  plan.blocks_needed = ceil_div(prompt.size(), bs) - full;
  // The next full block of the prompt: is another sequence computing it right now?
  if (known && config_.enable_prefix_caching && !in_flight_.empty() &&
      uint64_t{full + 1} * bs <= prompt.size()) {
    const uint64_t key = hash_fn_(m.last_key, prompt.subspan(uint64_t{full} * bs, bs));
    plan.prefix_in_flight = in_flight_.contains(key);
  }
  if (!known) {
    plan.fits = plan.blocks_needed <= pool_.available_for_new_tenant();
    return plan;
  }
  // Hits on cached-free blocks take them out of the evictable set.
  std::vector<BlockId> taken;
  for (BlockId b : m.blocks) {
    if (pool_.state(b) == BlockState::kCachedFree) taken.push_back(b);
  }
  plan.fits = plan.blocks_needed <= pool_.available_for(t, taken);
  return plan;
}

uint32_t KvCacheManager::available_blocks(std::string_view cache_salt) const {
  const std::optional<TenantId> t = find_tenant(cache_salt);
  return t ? pool_.available_for(*t) : pool_.available_for_new_tenant();
}

Result<uint32_t> KvCacheManager::admit(SeqId seq, std::span<const int32_t> prompt,
                                       std::string_view cache_salt, std::vector<BlockCopy>* copies,
                                       uint32_t chunk_budget) {
  if (prompt.empty()) return invalid_argument("admit: empty prompt");
  if (seqs_.contains(seq)) return invalid_argument("admit: sequence already exists");
  const std::optional<TenantId> tenant = find_tenant(cache_salt);
  const bool known = tenant.has_value();
  TenantId t = tenant.value_or(TenantId{});
  Match m;
  lookup(prompt, t, known, &m);
  const uint32_t bs = config_.block_size;
  const uint32_t full = m.full_tokens(bs);
  // Blocks obtainable once the hits are referenced (cached-free hits leave the evictable set),
  // keeping the partial copy's source too when there is one.
  std::vector<BlockId> taken;
  for (BlockId b : m.blocks)
    if (pool_.state(b) == BlockState::kCachedFree) taken.push_back(b);
  const uint32_t hits_only =
      known ? pool_.available_for(t, taken) : pool_.available_for_new_tenant();
  bool partial = m.partial.has_value() && copies != nullptr;
  uint32_t available = hits_only;
  if (partial && pool_.state(m.partial->block) == BlockState::kCachedFree) {
    taken.push_back(m.partial->block);
    available = pool_.available_for(t, taken);
  }
  const auto blocks_for = [&](uint32_t cached) {
    const uint32_t chunk = std::min<uint32_t>(chunk_budget, prompt.size() - cached);
    // The partial copy's destination and the chunk's blocks beyond the full hits.
    return ceil_div(uint64_t{cached} + chunk, bs) - full / bs;
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
  if (!known) {
    t = tenant_for(cache_salt);
    m.last_key = root_key(t);  // a new tenant: nothing matched, the chain starts at its root
  }
  SeqBlocks s(t, bs);
  for (BlockId b : m.blocks) {
    pool_.add_ref(b);
    s.table.push_block(b);
  }
  if (partial) {
    // Pin the source so that allocating the destination cannot evict it.
    const BlockId src = m.partial->block;
    pool_.add_ref(src);
    const std::optional<BlockId> dst = pool_.allocate(t);
    KVS_CHECK_MSG(dst.has_value(), "admit: allocation failed after the availability check");
    pool_.release(src);
    const uint32_t p = m.partial->num_tokens;
    copies->push_back(BlockCopy{src, *dst, p});
    ++cow_copies_;
    s.table.push_block(*dst);
    s.partial_tokens.assign(prompt.begin() + full, prompt.begin() + full + p);
  }
  s.table.add_tokens(cached);
  s.num_committed = cached;
  s.last_key = m.last_key;
  s.last_ref = m.last_ref;
  for (uint32_t i = s.table.num_blocks(); i < ceil_div(uint64_t{cached} + chunk, bs); ++i) {
    const std::optional<BlockId> b = pool_.allocate(t);
    KVS_CHECK_MSG(b.has_value(), "admit: allocation failed after the availability check");
    s.table.push_block(*b);
  }
  s.table.add_tokens(chunk);
  for (TenantCounters* tc : {&tenant_counters_[t.value], &totals_}) {
    tc->query_tokens += prompt.size();
    tc->hit_tokens += cached;
    tc->hit_block_tokens += full;
  }
  ++tenant_counters_[t.value].sequences;
  auto [it, inserted] = seqs_.emplace(seq, std::move(s));
  KVS_CHECK(inserted);
  if (config_.enable_prefix_caching) {
    register_in_flight(seq, it->second, prompt, full / bs, m.last_key);
  }
  return cached;
}

void KvCacheManager::register_in_flight(SeqId seq, SeqBlocks& s, std::span<const int32_t> prompt,
                                        uint32_t first_block, uint64_t parent_key) {
  const uint32_t bs = config_.block_size;
  uint64_t key = parent_key;
  for (uint64_t b = first_block; (b + 1) * bs <= prompt.size(); ++b) {
    key = hash_fn_(key, prompt.subspan(b * bs, bs));
    // The first sequence computing a block owns its entry; a later one (possible when the
    // block's first computation started before this prompt was looked up) does not take over.
    if (in_flight_.emplace(key, seq).second) s.in_flight_keys.push_back(key);
  }
}

void KvCacheManager::drop_in_flight(SeqId seq, SeqBlocks& s) {
  for (size_t i = s.in_flight_done; i < s.in_flight_keys.size(); ++i) {
    const auto it = in_flight_.find(s.in_flight_keys[i]);
    if (it != in_flight_.end() && it->second == seq) in_flight_.erase(it);
  }
  s.in_flight_keys.clear();
  s.in_flight_done = 0;
}

const KvCacheManager::SeqBlocks& KvCacheManager::seq_ref(SeqId seq) const {
  const auto it = seqs_.find(seq);
  KVS_CHECK_MSG(it != seqs_.end(), "unknown sequence");
  return it->second;
}

namespace {
// A write into the partly filled last block must not be seen by its other users.
bool needs_cow(const BlockTable& table, const BlockPool& pool, uint32_t num_tokens) {
  return num_tokens > 0 && table.partial_tokens() != 0 &&
         pool.refcount(table.block(table.num_blocks() - 1)) > 1;
}
}  // namespace

uint32_t KvCacheManager::blocks_needed_to_append(SeqId seq, uint32_t num_tokens) const {
  const SeqBlocks& s = seq_ref(seq);
  return s.table.blocks_to_add(num_tokens) + (needs_cow(s.table, pool_, num_tokens) ? 1 : 0);
}

bool KvCacheManager::can_append(SeqId seq, uint32_t num_tokens) const {
  const SeqBlocks& s = seq_ref(seq);
  const uint32_t need =
      s.table.blocks_to_add(num_tokens) + (needs_cow(s.table, pool_, num_tokens) ? 1 : 0);
  return need <= pool_.available_for(s.tenant);
}

Status KvCacheManager::append_slots(SeqId seq, uint32_t num_tokens,
                                    std::vector<BlockCopy>* copies) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return invalid_argument("append_slots: unknown sequence");
  SeqBlocks& s = it->second;
  const bool cow = needs_cow(s.table, pool_, num_tokens);
  const uint32_t add = s.table.blocks_to_add(num_tokens);
  if (add + (cow ? 1 : 0) > pool_.available_for(s.tenant)) {
    return resource_exhausted("append_slots: " + std::to_string(add + (cow ? 1 : 0)) +
                              " blocks needed, " + std::to_string(pool_.available_for(s.tenant)) +
                              " available");
  }
  // available_for is exact, so no allocation below can fail.
  if (cow) {
    KVS_CHECK_MSG(copies != nullptr, "append_slots needs a copy list for a shared block");
    const uint32_t last = s.table.num_blocks() - 1;
    const BlockId src = s.table.block(last);
    const std::optional<BlockId> dst = pool_.allocate(s.tenant);
    KVS_CHECK(dst.has_value());
    copies->push_back(BlockCopy{src, *dst, s.table.partial_tokens()});
    ++cow_copies_;
    pool_.release(src);  // still referenced by the other users
    s.table.set_block(last, *dst);
  }
  for (uint32_t i = 0; i < add; ++i) {
    const std::optional<BlockId> b = pool_.allocate(s.tenant);
    KVS_CHECK(b.has_value());
    s.table.push_block(*b);
  }
  s.table.add_tokens(num_tokens);
  return Status::ok();
}

void KvCacheManager::commit_full_block(SeqBlocks& s, uint32_t block_index,
                                       std::span<const int32_t> tokens) {
  const BlockId b = s.table.block(block_index);
  const uint64_t parent_key = s.last_key;
  const uint64_t key = hash_fn_(parent_key, tokens);
  KVS_DCHECK(block_index == 0 || s.last_ref.is_valid());
  KVS_CHECK_MSG(!cache_->contains(b), "a cached block is written again");
  if (s.in_flight_done < s.in_flight_keys.size() && s.in_flight_keys[s.in_flight_done] == key) {
    // Blocks are committed in chain order, so the next registered key is the only candidate.
    in_flight_.erase(key);
    ++s.in_flight_done;
  }
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
}

void KvCacheManager::commit_tokens(SeqId seq, std::span<const int32_t> tokens) {
  const auto it = seqs_.find(seq);
  KVS_CHECK_MSG(it != seqs_.end(), "commit_tokens: unknown sequence");
  SeqBlocks& s = it->second;
  KVS_CHECK_MSG(uint64_t{s.num_committed} + tokens.size() <= s.table.num_tokens(),
                "commit_tokens beyond the appended slots");
  const uint32_t bs = config_.block_size;
  size_t i = 0;
  while (i < tokens.size()) {
    const size_t take = std::min<size_t>(bs - s.partial_tokens.size(), tokens.size() - i);
    s.num_committed += static_cast<uint32_t>(take);
    if (s.partial_tokens.empty() && take == bs) {
      // A whole block at once (prefill): no staging copy.
      if (config_.enable_prefix_caching) {
        commit_full_block(s, s.num_committed / bs - 1, tokens.subspan(i, bs));
      }
    } else {
      s.partial_tokens.insert(s.partial_tokens.end(), tokens.begin() + i,
                              tokens.begin() + i + take);
      if (s.partial_tokens.size() == bs) {
        if (config_.enable_prefix_caching) {
          commit_full_block(s, s.num_committed / bs - 1, s.partial_tokens);
        }
        s.partial_tokens.clear();
      }
    }
    i += take;
  }
}

Status KvCacheManager::fork(SeqId parent, SeqId child) {
  const auto it = seqs_.find(parent);
  if (it == seqs_.end()) return invalid_argument("fork: unknown parent sequence");
  if (seqs_.contains(child)) return invalid_argument("fork: child sequence already exists");
  if (it->second.num_committed != it->second.table.num_tokens()) {
    return invalid_argument("fork: parent has appended slots that are not committed");
  }
  SeqBlocks copy = it->second;
  copy.in_flight_keys.clear();  // the parent keeps computing (and owning) them
  copy.in_flight_done = 0;
  for (BlockId b : copy.table.blocks()) pool_.add_ref(b);
  ++tenant_counters_[copy.tenant.value].sequences;
  seqs_.emplace(child, std::move(copy));
  return Status::ok();
}

Status KvCacheManager::admit_restored(SeqId seq, std::span<const int32_t> tokens,
                                      std::string_view cache_salt) {
  if (tokens.empty()) return invalid_argument("admit_restored: no tokens");
  if (seqs_.contains(seq)) return invalid_argument("admit_restored: sequence already exists");
  const TenantId t = tenant_for(cache_salt);
  const uint32_t need = ceil_div(tokens.size(), config_.block_size);
  if (need > pool_.available_for(t)) {
    return resource_exhausted("admit_restored: " + std::to_string(need) + " blocks needed, " +
                              std::to_string(pool_.available_for(t)) + " available");
  }
  SeqBlocks s(t, config_.block_size);
  s.last_key = root_key(t);
  seqs_.emplace(seq, std::move(s));
  ++tenant_counters_[t.value].sequences;
  // A fresh table never needs a copy; the availability check above makes this succeed.
  const Status st = append_slots(seq, static_cast<uint32_t>(tokens.size()), nullptr);
  KVS_CHECK_MSG(st.is_ok(), "admit_restored: append_slots failed after the check");
  commit_tokens(seq, tokens);
  return Status::ok();
}

void KvCacheManager::free(SeqId seq) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  drop_in_flight(seq, it->second);
  const std::span<const BlockId> blocks = it->second.table.blocks();
  // Last to first: the chain's tail enters the LRU first and is evicted before its parents.
  for (size_t i = blocks.size(); i-- > 0;) pool_.release(blocks[i]);
  --tenant_counters_[it->second.tenant.value].sequences;
  seqs_.erase(it);
}

uint32_t KvCacheManager::forget_idle_tenants(double now, double idle_seconds) {
  uint32_t forgotten = 0;
  for (uint32_t t = 0; t < tenant_counters_.size(); ++t) {
    TenantCounters& tc = tenant_counters_[t];
    if (!tc.live) continue;
    if (tc.sequences != 0 || pool_.tenant_held(TenantId{t}) != 0) {
      tc.idle_since = -1;
      continue;
    }
    if (tc.idle_since < 0) {
      tc.idle_since = now;
      continue;
    }
    if (now - tc.idle_since < idle_seconds) continue;
    tenant_index_.erase(tenant_salts_[t]);
    tenant_salts_[t].clear();
    tenant_salts_[t].shrink_to_fit();
    tc = TenantCounters{.live = false};
    free_tenant_slots_.push_back(t);
    ++forgotten;
  }
  return forgotten;
}

uint32_t KvCacheManager::num_tenants() const {
  return static_cast<uint32_t>(tenant_salts_.size() - free_tenant_slots_.size());
}

bool KvCacheManager::contains(SeqId seq) const { return seqs_.contains(seq); }

std::span<const BlockId> KvCacheManager::block_table(SeqId seq) const {
  return seq_ref(seq).table.blocks();
}

uint32_t KvCacheManager::num_tokens(SeqId seq) const { return seq_ref(seq).table.num_tokens(); }

uint32_t KvCacheManager::num_committed(SeqId seq) const { return seq_ref(seq).num_committed; }

uint64_t KvCacheManager::slot(SeqId seq, uint32_t pos) const {
  const SeqBlocks& s = seq_ref(seq);
  KVS_CHECK(pos < s.table.num_tokens());
  return s.table.slot(pos);
}

void KvCacheManager::build_step_inputs(std::span<const StepRow> rows, StepInputs* out) const {
  const uint32_t bs = config_.block_size;
  out->slot_mapping.clear();
  out->context_lens.clear();
  out->block_tables.clear();
  uint32_t max_blocks = 0;
  for (const StepRow& r : rows) {
    max_blocks = std::max(max_blocks, ceil_div(uint64_t{r.first_pos} + r.num_tokens, bs));
  }
  out->max_blocks_per_seq = max_blocks;
  out->block_tables.resize(rows.size() * size_t{max_blocks}, 0);
  out->context_lens.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepRow& r = rows[i];
    const BlockTable& table = seq_ref(r.seq).table;
    const uint32_t ctx = r.first_pos + r.num_tokens;
    out->context_lens.push_back(ctx);
    const uint32_t nb = ceil_div(ctx, bs);
    uint32_t* row = out->block_tables.data() + i * max_blocks;
    const std::span<const BlockId> blocks = table.blocks();
    for (uint32_t j = 0; j < nb; ++j) row[j] = blocks[j].value;
    table.append_slot_mapping(r.first_pos, r.num_tokens, &out->slot_mapping);
  }
}

KvCacheCounters KvCacheManager::counters() const {
  KvCacheCounters c;
  c.num_blocks = config_.num_blocks;
  c.block_size = config_.block_size;
  c.blocks_free = pool_.num_free();
  c.blocks_cached_free = pool_.num_cached_free();
  c.blocks_in_use = pool_.num_in_use();
  c.prefix_query_tokens = totals_.query_tokens;
  c.prefix_hit_tokens = totals_.hit_tokens;
  c.prefix_hit_block_tokens = totals_.hit_block_tokens;
  c.evictions = pool_.num_evictions();
  c.cow_copies = cow_copies_;
  c.num_sequences = static_cast<uint32_t>(seqs_.size());
  c.num_tenants = num_tenants();
  return c;
}

KvCacheStats KvCacheManager::stats() const {
  const uint32_t bs = config_.block_size;
  KvCacheStats st;
  static_cast<KvCacheCounters&>(st) = counters();
  st.usage = static_cast<double>(st.blocks_in_use) / st.num_blocks;
  st.prefix_hit_rate = st.prefix_query_tokens == 0
                           ? 0
                           : static_cast<double>(st.prefix_hit_tokens) / st.prefix_query_tokens;
  // A shared block is filled as far as its fullest user has appended.
  std::vector<uint32_t> filled(config_.num_blocks, 0);
  for (const auto& [id, s] : seqs_) {
    const std::span<const BlockId> blocks = s.table.blocks();
    for (uint32_t j = 0; j < blocks.size(); ++j) {
      const uint32_t in_block =
          std::min<uint32_t>(bs, s.table.num_tokens() > j * bs ? s.table.num_tokens() - j * bs : 0);
      filled[blocks[j].value] = std::max(filled[blocks[j].value], in_block);
    }
  }
  st.allocated_slots = uint64_t{st.blocks_in_use} * bs;
  uint64_t used = 0;
  for (uint32_t f : filled) used += f;
  st.unfilled_slots = st.allocated_slots - used;
  st.fragmentation =
      st.allocated_slots == 0 ? 0 : static_cast<double>(st.unfilled_slots) / st.allocated_slots;
  return st;
}

std::vector<BlockInfo> KvCacheManager::block_infos() const {
  const uint32_t bs = config_.block_size;
  std::vector<BlockInfo> out(config_.num_blocks);
  for (uint32_t b = 0; b < config_.num_blocks; ++b) {
    const BlockId id{b};
    out[b].state = pool_.state(id);
    out[b].refcount = pool_.refcount(id);
    out[b].tenant = pool_.owner(id).value;
    if (out[b].state == BlockState::kCachedFree) out[b].filled = bs;
  }
  for (const auto& [sid, s] : seqs_) {
    const std::span<const BlockId> blocks = s.table.blocks();
    for (uint32_t j = 0; j < blocks.size(); ++j) {
      const uint32_t n = s.table.num_tokens();
      const uint32_t in_block = std::min<uint32_t>(bs, n > j * bs ? n - j * bs : 0);
      out[blocks[j].value].filled = std::max(out[blocks[j].value].filled, in_block);
    }
  }
  return out;
}

std::vector<TenantStats> KvCacheManager::tenant_stats() const {
  std::vector<TenantStats> out;
  out.reserve(tenant_salts_.size());
  for (uint32_t t = 0; t < tenant_salts_.size(); ++t) {
    if (!tenant_counters_[t].live) continue;
    const TenantId id{t};
    out.push_back(TenantStats{.id = t,
                              .cache_salt = tenant_salts_[t],
                              .prefix_query_tokens = tenant_counters_[t].query_tokens,
                              .prefix_hit_tokens = tenant_counters_[t].hit_tokens,
                              .prefix_hit_block_tokens = tenant_counters_[t].hit_block_tokens,
                              .blocks_held = pool_.tenant_held(id),
                              .blocks_cached_free = pool_.tenant_cached_free(id),
                              .blocks_evicted = pool_.tenant_evicted(id)});
  }
  return out;
}

Status KvCacheManager::check_integrity() const {
  const uint32_t bs = config_.block_size;
  std::vector<uint32_t> refs(config_.num_blocks, 0);
  std::vector<uint32_t> tenant_sequences(tenant_salts_.size(), 0);
  size_t in_flight_owned = 0;
  for (const auto& [id, s] : seqs_) {
    const std::string name = "sequence " + std::to_string(id.value);
    const BlockTable& table = s.table;
    if (s.tenant.value >= tenant_salts_.size() || !tenant_counters_[s.tenant.value].live)
      return internal_error(name + ": unknown tenant");
    ++tenant_sequences[s.tenant.value];
    if (table.num_blocks() != ceil_div(table.num_tokens(), bs)) {
      return internal_error(name + ": block count does not match its token count");
    }
    if (s.num_committed > table.num_tokens()) {
      return internal_error(name + ": more tokens committed than appended");
    }
    if (s.partial_tokens.size() != s.num_committed % bs) {
      return internal_error(name + ": staged token ids do not match the committed count");
    }
    if (config_.enable_prefix_caching && s.num_committed >= bs && !s.last_ref.is_valid()) {
      return internal_error(name + ": full blocks committed but no chain position");
    }
    for (BlockId b : table.blocks()) {
      if (!b.is_valid() || b.value >= config_.num_blocks) {
        return internal_error(name + ": invalid block id");
      }
      if (pool_.state(b) == BlockState::kInUse && !(pool_.owner(b) == s.tenant)) {
        return internal_error(name + ": uses a block of another tenant");
      }
      ++refs[b.value];
    }
    // Only the last block may be partly filled; a write must never go to a cached block.
    if (table.partial_tokens() != 0 && cache_->contains(table.block(table.num_blocks() - 1))) {
      return internal_error(name + ": partly filled last block is in the prefix cache");
    }
    for (size_t i = s.in_flight_done; i < s.in_flight_keys.size(); ++i) {
      const auto f = in_flight_.find(s.in_flight_keys[i]);
      if (f == in_flight_.end() || !(f->second == id)) {
        return internal_error(name + ": an in-flight block key is not registered to it");
      }
      ++in_flight_owned;
    }
  }
  if (in_flight_owned != in_flight_.size()) {
    return internal_error("in-flight block keys registered to no live sequence");
  }
  size_t live_tenants = 0;
  for (uint32_t t = 0; t < tenant_salts_.size(); ++t) {
    const TenantCounters& tc = tenant_counters_[t];
    if (tc.sequences != tenant_sequences[t])
      return internal_error("tenant " + std::to_string(t) + ": sequence count");
    if (!tc.live) {
      if (pool_.tenant_held(TenantId{t}) != 0)
        return internal_error("forgotten tenant " + std::to_string(t) + " holds blocks");
      continue;
    }
    ++live_tenants;
    const auto it = tenant_index_.find(tenant_salts_[t]);
    if (it == tenant_index_.end() || it->second != t)
      return internal_error("tenant " + std::to_string(t) + " is not indexed by its salt");
  }
  if (live_tenants != tenant_index_.size() ||
      live_tenants + free_tenant_slots_.size() != tenant_salts_.size())
    return internal_error("tenant slots and the salt index disagree");
  return pool_.check_integrity(refs);
}

}  // namespace kvs
