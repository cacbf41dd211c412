#include "tiers/tier_policy.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace kvs {

void TierPolicy::plan_demote(const HostTier::Evicted& e, KvTransferPlan& plan) {
  ++t_.host_stats.blocks_evicted;
  if (t_.config.log_events) t_.host_events.push_back({.stored = false, .key = e.meta.key});
  if (!t_.admits_to_disk(e.meta)) return;
  plan.tier_records.push_back({e.meta, e.tokens});
  plan.transfers.push_back({.kind = KvTransferKind::kTierDemote,
                            .src = e.slot,
                            .dst = static_cast<uint32_t>(plan.tier_records.size() - 1)});
}

void TierPolicy::plan_store(BlockId block, const TierBlockMeta& meta,
                            std::span<const int32_t> tokens, KvTransferPlan& plan) {
  bool stored = false;
  if (t_.host) {
    stored = t_.host->contains(meta.key);
    if (!stored) {
      std::optional<uint32_t> slot = t_.host->insert(meta, tokens);
      while (!slot) {
        const std::optional<HostTier::Evicted> e = t_.host->evict_lru();
        if (!e) break;  // the host area is all swap's right now
        plan_demote(*e, plan);
        slot = t_.host->insert(meta, tokens);
      }
      if (slot) {
        if (t_.config.log_events)
          t_.host_events.push_back({.stored = true,
                                    .key = meta.key,
                                    .parent_key = meta.parent_key,
                                    .tokens = std::vector<int32_t>(tokens.begin(), tokens.end())});
        plan.transfers.push_back(
            {.kind = KvTransferKind::kTierStore, .src = block.value, .dst = *slot});
        ++t_.host_stats.blocks_stored;
        stored = true;
      }
    }
  }
  // Straight to disk: write-through always; write-back when there is no L2 room.
  if (t_.disk != nullptr && (t_.write_through() || (!stored && t_.admits_to_disk(meta)))) {
    plan.tier_records.push_back({meta, std::vector<int32_t>(tokens.begin(), tokens.end())});
    plan.transfers.push_back({.kind = KvTransferKind::kDiskStore,
                              .src = block.value,
                              .dst = static_cast<uint32_t>(plan.tier_records.size() - 1)});
  }
}

void TierPolicy::plan_completed(BlockId block, const TierBlockMeta& meta,
                                std::span<const int32_t> tokens, KvTransferPlan& plan) {
  if (t_.write_through()) plan_store(block, meta, tokens, plan);
  if (!t_.remote) return;
  plan.tier_records.push_back({meta, std::vector<int32_t>(tokens.begin(), tokens.end())});
  plan.transfers.push_back({.kind = KvTransferKind::kRemoteStore,
                            .src = block.value,
                            .dst = static_cast<uint32_t>(plan.tier_records.size() - 1)});
}

bool TierPolicy::make_host_room(uint32_t n, KvTransferPlan& plan) {
  while (t_.area->num_free() < n && t_.host) {
    const std::optional<HostTier::Evicted> e = t_.host->evict_lru();
    if (!e) break;
    plan_demote(*e, plan);
  }
  return t_.area->num_free() >= n;
}

TierPolicy::Found TierPolicy::find(std::span<const TierBlockMeta> chain,
                                   std::span<const int32_t> tokens, double prefill_tokens_per_s,
                                   bool give_up, KvTransferPlan& plan) {
  Found out;
  const auto block_tokens = [&](size_t i) {
    return tokens.subspan(i * t_.block_size, t_.block_size);
  };
  size_t i = 0;
  std::vector<std::pair<size_t, uint32_t>> host_hits;  // (chain index, slot), touched at the end
  while (i < chain.size()) {
    size_t j = i;
    std::vector<uint32_t> slots;
    while (t_.host && j < chain.size()) {
      const std::optional<uint32_t> slot = t_.host->find(chain[j], block_tokens(j));
      if (!slot) break;
      slots.push_back(*slot);
      ++j;
    }
    if (j > i) {
      if (!worth_loading(t_.host_stats, j - i, prefill_tokens_per_s)) {
        ++t_.host_stats.recompute_decisions;
        break;
      }
      ++t_.host_stats.load_decisions;
      for (uint32_t s : slots)
        out.hits.push_back({.source = Source::kHost, .src = s, .meta = t_.host->meta(s)});
      i = j;
      continue;
    }
    while (t_.disk && j < chain.size() && t_.disk->contains(chain[j], block_tokens(j))) ++j;
    if (j == i) {
      if (!t_.remote) break;
      const RemoteFound r = find_remote(chain.subspan(i), tokens.subspan(i * t_.block_size),
                                        prefill_tokens_per_s, give_up, plan, out.hits);
      if (r == RemoteFound::kLoading) {
        out.hits.clear();
        out.loading = true;
        return out;
      }
      break;  // the remote tier is the last: its run ends the walk
    }
    if (!worth_loading(t_.disk_stats, j - i, prefill_tokens_per_s)) {
      ++t_.disk_stats.recompute_decisions;
      break;
    }
    // The engine thread never reads the disk: the loader thread reads and verifies the run's
    // extents first (the request waits, "loading"); a request that has waited long enough takes
    // what is ready and recomputes the rest, so a slow or hung device delays only its own.
    size_t ready = i;
    while (ready < j &&
           t_.disk->readiness(chain[ready], block_tokens(ready)) == DiskTier::Readiness::kReady)
      ++ready;
    if (ready < j && !give_up) {
      for (size_t k = ready; k < j; ++k) t_.disk->prefetch(chain[k], block_tokens(k));
      out.hits.clear();
      out.loading = true;
      return out;
    }
    if (ready == i) break;
    ++t_.disk_stats.load_decisions;
    // A block's load latency: its share of the loader thread's measured extent reads.
    const DiskTierCounters c = t_.disk->counters();
    const double per_block =
        c.bytes_read > 0 ? c.read_seconds * static_cast<double>(t_.block_bytes) / c.bytes_read : 0;
    for (; i < ready; ++i) {
      Result<VerifiedBlock> block = t_.disk->verified_block(chain[i], block_tokens(i));
      if (!block.is_ok()) break;
      TierStack::record_load(t_.disk_stats, per_block, t_.block_bytes);
      plan.tier_reads.push_back(std::move(*block));
      out.hits.push_back({.source = Source::kDisk,
                          .src = static_cast<uint32_t>(plan.tier_reads.size() - 1),
                          .meta = chain[i]});
    }
    if (i < j) break;  // evicted from the verified extents meanwhile, or given up: recomputed
  }
  // Pinned until the step's transfers have run (end_step): no store queued later in this step
  // may reuse a slot whose load is still to come.
  for (const Hit& h : out.hits) {
    if (h.source != Source::kHost) continue;
    t_.host->touch(h.src);
    t_.host->pin(h.src);
  }
  return out;
}

TierPolicy::RemoteFound TierPolicy::find_remote(std::span<const TierBlockMeta> chain,
                                                std::span<const int32_t> tokens,
                                                double prefill_tokens_per_s, bool give_up,
                                                KvTransferPlan& plan, std::vector<Hit>& hits) {
  const auto block_tokens = [&](size_t i) {
    return tokens.subspan(i * t_.block_size, t_.block_size);
  };
  // At most half of what the fetched-block cache holds: a longer run would evict its own first
  // blocks before the last arrive.
  const size_t cache_blocks = static_cast<size_t>(t_.remote->config().fetched_cache_bytes /
                                                  std::max<uint64_t>(1, t_.block_bytes));
  const size_t n =
      std::min({chain.size(), kMaxRemoteFetchBlocks, std::max<size_t>(1, cache_blocks / 2)});
  // The run of blocks fetched and verified; where it stops at a block not asked for yet (or
  // being fetched), the rest of the chain is fetched and the request waits (loading).
  const auto ready_run = [&](bool* need) {
    size_t j = 0;
    *need = false;
    for (; j < n; ++j) {
      const RemoteTier::Readiness r = t_.remote->readiness(chain[j], block_tokens(j));
      if (r == RemoteTier::Readiness::kReady) continue;
      *need = r == RemoteTier::Readiness::kUnknown || r == RemoteTier::Readiness::kPending;
      break;
    }
    return j;
  };
  bool need = false;
  const size_t j = ready_run(&need);
  // A request that has waited long enough takes what is ready and computes the rest: the step
  // never waits for Redis.
  if (need && !give_up) {
    t_.remote->fetch(chain.subspan(j, n - j),
                     tokens.subspan(j * t_.block_size, (n - j) * t_.block_size));
    return RemoteFound::kLoading;
  }
  if (j == 0) return RemoteFound::kNone;
  if (!worth_loading(t_.remote_stats, j, prefill_tokens_per_s)) {
    ++t_.remote_stats.recompute_decisions;
    return RemoteFound::kNone;
  }
  ++t_.remote_stats.load_decisions;
  const RemoteTierCounters c = t_.remote->counters();
  const double per_block = c.found > 0 ? c.read_seconds / c.found : 0;
  for (size_t k = 0; k < j; ++k) {
    Result<VerifiedBlock> block = t_.remote->verified_block(chain[k], block_tokens(k));
    if (!block.is_ok()) break;
    TierStack::record_load(t_.remote_stats, per_block, t_.block_bytes);
    plan.tier_reads.push_back(std::move(*block));
    hits.push_back({.source = Source::kRemote,
                    .src = static_cast<uint32_t>(plan.tier_reads.size() - 1),
                    .meta = chain[k]});
  }
  // The online bandwidth: what the reader thread measured over every GET so far.
  if (c.read_seconds > 0 && c.bytes_read > 0)
    t_.remote_stats.load_bytes_per_s = c.bytes_read / c.read_seconds;
  return RemoteFound::kHits;
}

bool TierPolicy::worth_loading(const TierStats& t, size_t n, double prefill_tokens_per_s) const {
  if (prefill_tokens_per_s <= 0 || t.load_bytes_per_s <= 0) return true;
  return n * t_.block_bytes / t.load_bytes_per_s <= n * t_.block_size / prefill_tokens_per_s;
}

bool TierPolicy::wait_for_tier_reads(double timeout_seconds) {
  if (t_.disk != nullptr && t_.disk->wait_for_reads(timeout_seconds)) return true;
  return t_.remote != nullptr && t_.remote->wait_for_reads(timeout_seconds);
}

void TierPolicy::plan_loads(std::span<const Hit> hits, std::span<const BlockId> blocks,
                            KvTransferPlan& plan) {
  KVS_CHECK(blocks.size() <= hits.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Hit& h = hits[i];
    plan.transfers.push_back(
        {.kind = h.source == Source::kHost ? KvTransferKind::kTierLoad : KvTransferKind::kReadLoad,
         .src = h.src,
         .dst = blocks[i].value});
    TierStats& t = h.source == Source::kHost   ? t_.host_stats
                   : h.source == Source::kDisk ? t_.disk_stats
                                               : t_.remote_stats;
    t.hit_tokens += t_.block_size;
  }
}

void TierPolicy::end_step() {
  if (t_.host) t_.host->unpin_all();
  if (t_.disk && t_.disk_added_this_step == 0) t_.disk->close_open_extent();
  t_.disk_added_this_step = 0;
}

}  // namespace kvs
