#include "server/kv_view.h"

#include <algorithm>
#include <chrono>

#include "server/api_keys.h"

namespace kvs {

KvView take_kv_view(const Engine& engine) {
  const auto start = std::chrono::steady_clock::now();
  KvView v;
  v.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  v.blocks = engine.block_infos();
  engine.for_each_block_table([&](const SequenceBlocks& s) {
    KvViewSequence& out =
        v.sequences.emplace_back(KvViewSequence{.seq = s.seq.value,
                                                .request = s.request.value,
                                                .sample = s.sample,
                                                .num_tokens = s.num_tokens,
                                                .cache_salt = std::string(s.cache_salt)});
    out.tables.reserve(s.tables.size());
    for (const auto& t : s.tables) out.tables.emplace_back(t.begin(), t.end());
  });
  std::sort(v.sequences.begin(), v.sequences.end(),
            [](const KvViewSequence& a, const KvViewSequence& b) { return a.seq < b.seq; });
  v.tenants = engine.tenant_stats();
  v.engine = engine.snapshot(/*with_fragmentation=*/true);
  v.steps = engine.counters().steps;
  if (v.engine.offload.host_enabled) v.host_block_hashes = engine.host_tier_block_hashes();
  if (v.engine.offload.disk_enabled) v.disk_block_hashes = engine.disk_tier_block_hashes();
  v.take_us = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now() - start)
                                        .count());
  return v;
}

KvView scoped_kv_view(const KvView& view, const ViewScope& scope) {
  if (scope.admin) return view;
  KvView v;
  v.unix_ms = view.unix_ms;
  v.take_us = view.take_us;
  v.engine = view.engine;
  v.steps = view.steps;
  // Tenants: the caller's own, and everyone else summed into one anonymous entry.
  std::vector<uint8_t> own;  // by slot
  TenantStats other{.id = kOtherTenantsSlot, .cache_salt = kOtherTenantsNamespace};
  bool any_other = false;
  for (const TenantStats& t : view.tenants) {
    if (t.id >= own.size()) own.resize(t.id + 1, 0);
    if (namespace_tenant(t.cache_salt) == scope.tenant) {
      own[t.id] = 1;
      v.tenants.push_back(t);
      continue;
    }
    any_other = true;
    other.prefix_query_tokens += t.prefix_query_tokens;
    other.prefix_hit_tokens += t.prefix_hit_tokens;
    other.prefix_hit_block_tokens += t.prefix_hit_block_tokens;
    other.blocks_held += t.blocks_held;
    other.blocks_cached_free += t.blocks_cached_free;
    other.blocks_evicted += t.blocks_evicted;
  }
  if (any_other) v.tenants.push_back(other);
  v.blocks = view.blocks;
  for (BlockInfo& b : v.blocks) {
    b.tier_key = 0;  // hashes are for admins only
    if (b.state == BlockState::kFree) continue;
    if (b.tenant < own.size() && own[b.tenant] != 0) continue;
    b.tenant = kOtherTenantsSlot;
    b.refcount = 1;
    b.filled = 0;
  }
  for (const KvViewSequence& s : view.sequences)
    if (namespace_tenant(s.cache_salt) == scope.tenant) v.sequences.push_back(s);
  // The tiers' block lists are hashes too.
  return v;
}

}  // namespace kvs
