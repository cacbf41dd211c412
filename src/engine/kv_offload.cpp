#include "engine/kv_offload.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"

namespace kvs {

namespace {
using SteadyClock = std::chrono::steady_clock;
double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}
}  // namespace

const char* offload_policy_name(OffloadPolicy p) {
  return p == OffloadPolicy::kWriteThrough ? "write-through" : "write-back";
}

Result<OffloadPolicy> parse_offload_policy(const std::string& name) {
  if (name == "write-back") return OffloadPolicy::kWriteBack;
  if (name == "write-through") return OffloadPolicy::kWriteThrough;
  return invalid_argument("--kv-offload-policy must be write-back or write-through, got '" + name +
                          "'");
}

Status KvOffloadConfig::validate() const {
  if (!disk_dir.empty() && disk_bytes == 0)
    return invalid_argument("--kv-offload-disk-bytes must be positive with --kv-offload-dir");
  if (extent_blocks == 0 || extent_blocks > kMaxExtentBlocks)
    return invalid_argument("--kv-offload-extent-blocks must be 1.." +
                            std::to_string(kMaxExtentBlocks));
  if (!remote_urls.empty() && remote_timeout_ms == 0)
    return invalid_argument("--kv-remote-timeout-ms must be positive");
  for (const std::string& url : remote_urls) KVS_RETURN_IF_ERROR(parse_redis_url(url).status());
  return Status::ok();
}

KvOffload::KvOffload(const KvOffloadConfig& config, HostBlockPool& area,
                     KvBlockStorage* host_storage, uint32_t block_size, uint64_t pool_block_bytes)
    : config_(config),
      area_(area),
      host_storage_(host_storage),
      block_size_(block_size),
      pool_block_bytes_(pool_block_bytes),
      block_bytes_(pool_block_bytes),
      log_events_(config.log_events) {}

Result<std::unique_ptr<KvOffload>> KvOffload::create(
    const KvOffloadConfig& config, const KvStorageShape& pool, uint64_t model_fingerprint,
    const TierSecrets& secrets, HostBlockPool& area, KvBlockStorage* host_storage,
    uint32_t host_tier_blocks) {
  if (host_tier_blocks > 0 &&
      (host_storage == nullptr || host_storage->shape().num_blocks < area.num_blocks()))
    return invalid_argument("kv offload: the host tier needs the host area's bytes");
  KVS_RETURN_IF_ERROR(config.validate());
  KVS_ASSIGN_OR_RETURN(const PagedKvLayout pool_layout, KvBlockStorage::layout_of(pool));
  std::unique_ptr<KvOffload> o(
      new KvOffload(config, area, host_storage, pool.block_size, pool_layout.block_bytes));
  ExtentNamespace ns{.model_fingerprint = model_fingerprint,
                     .k_dtype = pool.k_dtype,
                     .v_dtype = pool.v_dtype,
                     .block_size = pool.block_size,
                     .block_bytes = pool_layout.block_bytes,
                     .secret_id = secrets.id};
  if (config.tier_dtype &&
      (*config.tier_dtype != pool.k_dtype || *config.tier_dtype != pool.v_dtype)) {
    KVS_ASSIGN_OR_RETURN(KvBlockTranscoder t,
                         KvBlockTranscoder::create(pool, *config.tier_dtype, *config.tier_dtype));
    o->block_bytes_ = t.tier_block_bytes();
    o->transcoder_ = std::move(t);
    o->scratch_.resize(o->block_bytes_);
    // The extents hold the demoted format (the tier keys still name the pool's).
    ns.k_dtype = ns.v_dtype = *config.tier_dtype;
    ns.block_bytes = o->block_bytes_;
  }
  o->host_area_blocks_ = host_tier_blocks;
  if (host_tier_blocks > 0) {
    const uint32_t per_block = static_cast<uint32_t>(o->pool_block_bytes_ / o->block_bytes_);
    o->host_ =
        std::make_unique<HostTier>(area, pool.block_size, host_tier_blocks * per_block, per_block);
  }
  if (!config.disk_dir.empty()) {
    KVS_ASSIGN_OR_RETURN(o->disk_, DiskTier::open({.dir = config.disk_dir,
                                                   .capacity_bytes = config.disk_bytes,
                                                   .ns = ns,
                                                   .mac_key = secrets.mac,
                                                   .extent_blocks = config.extent_blocks,
                                                   .log_events = config.log_events}));
  }
  if (!config.remote_urls.empty()) {
    RemoteTierConfig rc{.ttl_seconds = config.remote_ttl_seconds,
                        .timeout_ms = config.remote_timeout_ms,
                        .ns = ns,
                        .mac_key = secrets.mac};
    for (const std::string& url : config.remote_urls) {
      KVS_ASSIGN_OR_RETURN(RedisEndpoint e, parse_redis_url(url));
      rc.endpoints.push_back(std::move(e));
    }
    KVS_ASSIGN_OR_RETURN(o->remote_, RemoteTier::create(rc));
  }
  o->measure_startup_bandwidth();
  return o;
}

uint8_t* KvOffload::slot_data(uint32_t slot) const {
  const uint32_t per = host_->slots_per_block();
  return host_storage_->mutable_block_data(slot / per) + (slot % per) * block_bytes_;
}

const uint8_t* KvOffload::tier_bytes_of(const KvBlockStorage& device, uint32_t block) {
  if (!transcoder_) return device.block_data(block);
  transcoder_->encode(device.block_data(block), scratch_.data());
  return scratch_.data();
}

void KvOffload::measure_startup_bandwidth() {
  // Host: copies of a few blocks' worth of bytes (what a kTierLoad does).
  const size_t bytes = static_cast<size_t>(std::min<uint64_t>(block_bytes_ * 8, 64 << 20));
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  auto t0 = SteadyClock::now();
  for (int i = 0; i < 4; ++i) std::memcpy(b.data(), a.data(), bytes);
  host_stats_.load_bytes_per_s = 4.0 * bytes / std::max(seconds_since(t0), 1e-9);
  if (remote_) remote_stats_.load_bytes_per_s = remote_->startup_bytes_per_s();
  if (!disk_) return;
  // Disk: a probe file written and read back (a temporary file of the tier's directory, created
  // as extents are: exclusively, under a random name, never through a link).
  disk_stats_.load_bytes_per_s = disk_->measure_read_bandwidth(bytes);
}

void KvOffload::record_load(TierStats& t, double seconds, uint64_t bytes) {
  ++t.blocks_loaded;
  ++t.load_count;
  t.load_seconds_sum += seconds;
  size_t i = 0;
  while (i < kTierLoadBuckets.size() && seconds > kTierLoadBuckets[i]) ++i;
  ++t.load_buckets[i];
  if (seconds > 0) {
    const double bw = bytes / seconds;
    t.load_bytes_per_s = t.load_bytes_per_s > 0 ? 0.9 * t.load_bytes_per_s + 0.1 * bw : bw;
  }
}

void KvOffload::plan_demote(const HostTier::Evicted& e, KvTransferPlan& plan) {
  ++host_stats_.blocks_evicted;
  if (log_events_) host_events_.push_back({.stored = false, .key = e.meta.key});
  if (!admits_to_disk(e.meta)) return;
  plan.tier_records.push_back({e.meta, e.tokens});
  plan.transfers.push_back({.kind = KvTransferKind::kTierDemote,
                            .src = e.slot,
                            .dst = static_cast<uint32_t>(plan.tier_records.size() - 1)});
}

void KvOffload::plan_store(BlockId block, const TierBlockMeta& meta,
                           std::span<const int32_t> tokens, KvTransferPlan& plan) {
  bool stored = false;
  if (host_) {
    stored = host_->contains(meta.key);
    if (!stored) {
      std::optional<uint32_t> slot = host_->insert(meta, tokens);
      while (!slot) {
        const std::optional<HostTier::Evicted> e = host_->evict_lru();
        if (!e) break;  // the host area is all swap's right now
        plan_demote(*e, plan);
        slot = host_->insert(meta, tokens);
      }
      if (slot) {
        if (log_events_)
          host_events_.push_back({.stored = true,
                                  .key = meta.key,
                                  .parent_key = meta.parent_key,
                                  .tokens = std::vector<int32_t>(tokens.begin(), tokens.end())});
        plan.transfers.push_back(
            {.kind = KvTransferKind::kTierStore, .src = block.value, .dst = *slot});
        ++host_stats_.blocks_stored;
        stored = true;
      }
    }
  }
  // Straight to disk: write-through always; write-back when there is no L2 room.
  if (disk_ != nullptr && (write_through() || (!stored && admits_to_disk(meta)))) {
    plan.tier_records.push_back({meta, std::vector<int32_t>(tokens.begin(), tokens.end())});
    plan.transfers.push_back({.kind = KvTransferKind::kDiskStore,
                              .src = block.value,
                              .dst = static_cast<uint32_t>(plan.tier_records.size() - 1)});
  }
}

void KvOffload::plan_completed(BlockId block, const TierBlockMeta& meta,
                               std::span<const int32_t> tokens, KvTransferPlan& plan) {
  if (write_through()) plan_store(block, meta, tokens, plan);
  if (!remote_) return;
  plan.tier_records.push_back({meta, std::vector<int32_t>(tokens.begin(), tokens.end())});
  plan.transfers.push_back({.kind = KvTransferKind::kRemoteStore,
                            .src = block.value,
                            .dst = static_cast<uint32_t>(plan.tier_records.size() - 1)});
}

bool KvOffload::make_host_room(uint32_t n, KvTransferPlan& plan) {
  while (area_.num_free() < n && host_) {
    const std::optional<HostTier::Evicted> e = host_->evict_lru();
    if (!e) break;
    plan_demote(*e, plan);
  }
  return area_.num_free() >= n;
}

KvOffload::Found KvOffload::find(std::span<const TierBlockMeta> chain,
                                 std::span<const int32_t> tokens, double prefill_tokens_per_s,
                                 bool give_up, KvTransferPlan& plan) {
  Found out;
  const auto block_tokens = [&](size_t i) { return tokens.subspan(i * block_size_, block_size_); };
  size_t i = 0;
  std::vector<std::pair<size_t, uint32_t>> host_hits;  // (chain index, slot), touched at the end
  while (i < chain.size()) {
    size_t j = i;
    std::vector<uint32_t> slots;
    while (host_ && j < chain.size()) {
      const std::optional<uint32_t> slot = host_->find(chain[j], block_tokens(j));
      if (!slot) break;
      slots.push_back(*slot);
      ++j;
    }
    if (j > i) {
      if (!worth_loading(host_stats_, j - i, prefill_tokens_per_s)) {
        ++host_stats_.recompute_decisions;
        break;
      }
      ++host_stats_.load_decisions;
      for (uint32_t s : slots)
        out.hits.push_back({.source = Source::kHost, .src = s, .meta = host_->meta(s)});
      i = j;
      continue;
    }
    while (disk_ && j < chain.size() && disk_->contains(chain[j], block_tokens(j))) ++j;
    if (j == i) {
      if (!remote_) break;
      const RemoteFound r = find_remote(chain.subspan(i), tokens.subspan(i * block_size_),
                                        prefill_tokens_per_s, give_up, plan, out.hits);
      if (r == RemoteFound::kLoading) {
        out.hits.clear();
        out.loading = true;
        return out;
      }
      break;  // the remote tier is the last: its run ends the walk
    }
    if (!worth_loading(disk_stats_, j - i, prefill_tokens_per_s)) {
      ++disk_stats_.recompute_decisions;
      break;
    }
    // The engine thread never reads the disk: the loader thread reads and verifies the run's
    // extents first (the request waits, "loading"); a request that has waited long enough takes
    // what is ready and recomputes the rest, so a slow or hung device delays only its own.
    size_t ready = i;
    while (ready < j &&
           disk_->readiness(chain[ready], block_tokens(ready)) == DiskTier::Readiness::kReady)
      ++ready;
    if (ready < j && !give_up) {
      for (size_t k = ready; k < j; ++k) disk_->prefetch(chain[k], block_tokens(k));
      out.hits.clear();
      out.loading = true;
      return out;
    }
    if (ready == i) break;
    ++disk_stats_.load_decisions;
    for (; i < ready; ++i) {
      std::vector<uint8_t> bytes(block_bytes_);
      const auto t0 = SteadyClock::now();
      if (!disk_->read_block(chain[i], block_tokens(i), bytes.data()).is_ok()) break;
      record_load(disk_stats_, seconds_since(t0), block_bytes_);
      plan.tier_reads.push_back(std::move(bytes));
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
    host_->touch(h.src);
    host_->pin(h.src);
  }
  return out;
}

KvOffload::RemoteFound KvOffload::find_remote(std::span<const TierBlockMeta> chain,
                                              std::span<const int32_t> tokens,
                                              double prefill_tokens_per_s, bool give_up,
                                              KvTransferPlan& plan, std::vector<Hit>& hits) {
  const auto block_tokens = [&](size_t i) { return tokens.subspan(i * block_size_, block_size_); };
  // At most half of what the fetched-block cache holds: a longer run would evict its own first
  // blocks before the last arrive.
  const size_t cache_blocks = static_cast<size_t>(remote_->config().fetched_cache_bytes /
                                                  std::max<uint64_t>(1, block_bytes_));
  const size_t n =
      std::min({chain.size(), kMaxRemoteFetchBlocks, std::max<size_t>(1, cache_blocks / 2)});
  // The run of blocks fetched and verified; where it stops at a block not asked for yet (or
  // being fetched), the rest of the chain is fetched and the request waits (loading).
  const auto ready_run = [&](bool* need) {
    size_t j = 0;
    *need = false;
    for (; j < n; ++j) {
      const RemoteTier::Readiness r = remote_->readiness(chain[j], block_tokens(j));
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
    remote_->fetch(chain.subspan(j, n - j), tokens.subspan(j * block_size_, (n - j) * block_size_));
    return RemoteFound::kLoading;
  }
  if (j == 0) return RemoteFound::kNone;
  if (!worth_loading(remote_stats_, j, prefill_tokens_per_s)) {
    ++remote_stats_.recompute_decisions;
    return RemoteFound::kNone;
  }
  ++remote_stats_.load_decisions;
  const RemoteTierCounters c = remote_->counters();
  const double per_block = c.found > 0 ? c.read_seconds / c.found : 0;
  for (size_t k = 0; k < j; ++k) {
    std::vector<uint8_t> bytes(block_bytes_);
    if (!remote_->read_block(chain[k], block_tokens(k), bytes.data()).is_ok()) break;
    record_load(remote_stats_, per_block, block_bytes_);
    plan.tier_reads.push_back(std::move(bytes));
    hits.push_back({.source = Source::kRemote,
                    .src = static_cast<uint32_t>(plan.tier_reads.size() - 1),
                    .meta = chain[k]});
  }
  // The online bandwidth: what the reader thread measured over every GET so far.
  if (c.read_seconds > 0 && c.bytes_read > 0)
    remote_stats_.load_bytes_per_s = c.bytes_read / c.read_seconds;
  return RemoteFound::kHits;
}

bool KvOffload::worth_loading(const TierStats& t, size_t n, double prefill_tokens_per_s) const {
  if (prefill_tokens_per_s <= 0 || t.load_bytes_per_s <= 0) return true;
  return n * block_bytes_ / t.load_bytes_per_s <= n * block_size_ / prefill_tokens_per_s;
}

std::vector<uint64_t> KvOffload::host_block_hashes() const {
  std::vector<uint64_t> out;
  if (host_) host_->for_each_mru([&](uint32_t slot) { out.push_back(host_->meta(slot).key); });
  return out;
}

std::vector<uint64_t> KvOffload::disk_block_hashes() const {
  return disk_ ? disk_->keys() : std::vector<uint64_t>{};
}

bool KvOffload::wait_for_tier_reads(double timeout_seconds) {
  if (disk_ != nullptr && disk_->wait_for_reads(timeout_seconds)) return true;
  return remote_ != nullptr && remote_->wait_for_reads(timeout_seconds);
}

void KvOffload::plan_loads(std::span<const Hit> hits, std::span<const BlockId> blocks,
                           KvTransferPlan& plan) {
  KVS_CHECK(blocks.size() <= hits.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Hit& h = hits[i];
    plan.transfers.push_back(
        {.kind = h.source == Source::kHost ? KvTransferKind::kTierLoad : KvTransferKind::kReadLoad,
         .src = h.src,
         .dst = blocks[i].value});
    TierStats& t = h.source == Source::kHost   ? host_stats_
                   : h.source == Source::kDisk ? disk_stats_
                                               : remote_stats_;
    t.hit_tokens += block_size_;
  }
}

void KvOffload::end_step() {
  if (host_) host_->unpin_all();
  if (disk_ && disk_added_this_step_ == 0) disk_->close_open_extent();
  disk_added_this_step_ = 0;
}

void KvOffload::store(const KvBlockStorage& device, uint32_t block, uint32_t slot) {
  if (transcoder_)
    transcoder_->encode(device.block_data(block), slot_data(slot));
  else
    std::memcpy(slot_data(slot), device.block_data(block), block_bytes_);
}

void KvOffload::load(KvBlockStorage& device, uint32_t slot, uint32_t block) {
  const auto t0 = SteadyClock::now();
  if (transcoder_)
    transcoder_->decode(slot_data(slot), device.mutable_block_data(block));
  else
    device.write_block(block, slot_data(slot));
  record_load(host_stats_, seconds_since(t0), block_bytes_);
}

void KvOffload::demote_slot(uint32_t slot, const TierRecord& record) {
  KVS_CHECK(disk_ != nullptr);
  if (disk_->add(record.meta, record.tokens, slot_data(slot))) ++disk_added_this_step_;
}

void KvOffload::demote_block(const KvBlockStorage& device, uint32_t block,
                             const TierRecord& record) {
  KVS_CHECK(disk_ != nullptr);
  if (disk_->add(record.meta, record.tokens, tier_bytes_of(device, block))) ++disk_added_this_step_;
}

void KvOffload::store_remote(const KvBlockStorage& device, uint32_t block,
                             const TierRecord& record) {
  KVS_CHECK(remote_ != nullptr);
  remote_->put(record.meta, record.tokens, tier_bytes_of(device, block));
}

void KvOffload::load_read(KvBlockStorage& device, const std::vector<uint8_t>& bytes,
                          uint32_t block) {
  KVS_CHECK(bytes.size() == block_bytes_);
  if (transcoder_)
    transcoder_->decode(bytes.data(), device.mutable_block_data(block));
  else
    device.write_block(block, bytes.data());
}

bool KvOffload::persist(const KvBlockStorage& device, const KvCacheManager& cache,
                        double timeout_seconds) {
  // The remote tier's queued writes go first (bounded by its timeout).
  if (remote_)
    remote_->flush(std::min(timeout_seconds, 4.0 * config_.remote_timeout_ms / 1000.0 + 0.5));
  if (!disk_) return true;
  if (host_) {
    host_->for_each_mru([&](uint32_t slot) {
      if (admits_to_disk(host_->meta(slot)))
        disk_->add(host_->meta(slot), host_->tokens(slot), slot_data(slot));
    });
  }
  for (BlockId b : cache.cached_blocks()) {
    const TierBlockMeta& meta = cache.tier_meta(b);
    if (admits_to_disk(meta))
      disk_->add(meta, cache.cached_tokens_of(b), tier_bytes_of(device, b.value));
  }
  return disk_->flush(timeout_seconds);
}

KvOffloadStats KvOffload::stats() const {
  KvOffloadStats s;
  s.enabled = true;
  s.policy = config_.policy;
  s.disk_admit_hits = config_.disk_admit_hits;
  if (transcoder_) s.tier_dtype = config_.tier_dtype;
  s.host = host_stats_;
  s.disk = disk_stats_;
  s.remote = remote_stats_;
  if (host_) {
    s.host_enabled = true;
    s.host.capacity_bytes = uint64_t{host_->capacity()} * block_bytes_;
    s.host_area_blocks = host_area_blocks_;
    s.host_blocks_held = host_->host_blocks_held();
    s.host.blocks = host_->size();
    s.host.used_bytes = s.host.blocks * block_bytes_;
  }
  if (disk_) {
    s.disk_enabled = true;
    const DiskTierCounters c = disk_->counters();
    s.disk.capacity_bytes = config_.disk_bytes;
    s.disk.used_bytes = c.used_bytes;
    s.disk.blocks = c.blocks;
    s.disk.blocks_stored = c.blocks_stored;
    s.disk.blocks_evicted = c.blocks_evicted;
    s.disk.checksum_failures = c.checksum_failures;
    s.disk.errors = c.io_errors;
    s.disk_foreign_extents = c.foreign_extents;
    s.disk_torn_files_removed = c.torn_files_removed;
    s.disk_skipped_entries = c.skipped_entries;
    s.disk_pending_blocks = c.pending_blocks;
    s.disk_admitting = c.admitting;
  }
  if (remote_) {
    s.remote_enabled = true;
    const RemoteTierCounters c = remote_->counters();
    s.remote.blocks_stored = c.blocks_stored;
    s.remote.checksum_failures = c.checksum_failures;
    s.remote.errors = c.errors;
    s.remote_dropped_writes = c.dropped_writes;
    s.remote_queued_writes = c.queued_writes;
    s.remote_bytes_written = c.bytes_written;
    s.remote_bytes_read = c.bytes_read;
    s.remote_instances = c.instances;
  }
  return s;
}

Status KvOffload::check_integrity() const {
  return host_ ? host_->check_integrity() : Status::ok();
}

}  // namespace kvs
