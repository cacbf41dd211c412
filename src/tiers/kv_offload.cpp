#include "tiers/kv_offload.h"

#include "core/check.h"

namespace kvs {

Result<std::unique_ptr<KvOffload>> KvOffload::create(
    const KvOffloadConfig& config, const KvStorageShape& pool, uint64_t model_fingerprint,
    const TierSecrets& secrets, HostBlockPool& area, KvBlockStorage* host_storage,
    uint32_t host_tier_blocks) {
  if (host_tier_blocks > 0 &&
      (host_storage == nullptr || host_storage->shape().num_blocks < area.num_blocks()))
    return invalid_argument("kv offload: the host tier needs the host area's bytes");
  KVS_RETURN_IF_ERROR(config.validate());
  KVS_ASSIGN_OR_RETURN(const PagedKvLayout pool_layout, KvBlockStorage::layout_of(pool));
  std::unique_ptr<KvOffload> o(new KvOffload());
  TierStack& t = o->stack_;
  t.config = config;
  t.area = &area;
  t.host_storage = host_storage;
  t.block_size = pool.block_size;
  t.pool_block_bytes = t.block_bytes = pool_layout.block_bytes;
  ExtentNamespace ns{.model_fingerprint = model_fingerprint,
                     .k_dtype = pool.k_dtype,
                     .v_dtype = pool.v_dtype,
                     .block_size = pool.block_size,
                     .block_bytes = pool_layout.block_bytes,
                     .secret_id = secrets.id};
  std::optional<KvBlockTranscoder> transcoder;
  // A pool with per-layer formats is demoted to one format for every layer, even its own.
  if (config.tier_dtype && (*config.tier_dtype != pool.k_dtype ||
                            *config.tier_dtype != pool.v_dtype || !pool.layer_formats.empty())) {
    KVS_ASSIGN_OR_RETURN(transcoder,
                         KvBlockTranscoder::create(pool, *config.tier_dtype, *config.tier_dtype));
    t.block_bytes = transcoder->tier_block_bytes();
    // The host tier packs demoted blocks into pool-sized host blocks: a larger one fits none.
    if (t.block_bytes > t.pool_block_bytes)
      return invalid_argument(std::string("--kv-offload-dtype ") +
                              kv_dtype_name(*config.tier_dtype) + " stores a block in " +
                              std::to_string(t.block_bytes) + " B, more than the pool's " +
                              std::to_string(t.pool_block_bytes) +
                              " B: the tiers demote to a smaller format (or \"same\")");
    t.demoted = true;
    // The extents hold the demoted format (the tier keys still name the pool's).
    ns.k_dtype = ns.v_dtype = *config.tier_dtype;
    ns.block_bytes = t.block_bytes;
  }
  t.host_area_blocks = host_tier_blocks;
  if (host_tier_blocks > 0) {
    const uint32_t per_block = static_cast<uint32_t>(t.pool_block_bytes / t.block_bytes);
    t.host =
        std::make_unique<HostTier>(area, pool.block_size, host_tier_blocks * per_block, per_block);
  }
  if (!config.disk_dir.empty()) {
    KVS_ASSIGN_OR_RETURN(t.disk, DiskTier::open({.dir = config.disk_dir,
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
    KVS_ASSIGN_OR_RETURN(t.remote, RemoteTier::create(rc));
  }
  o->stores_ = std::make_unique<TierStores>(t, std::move(transcoder));
  o->stores_->measure_startup_bandwidth();
  return o;
}
KvOffloadStats KvOffload::stats() const {
  KvOffloadStats s;
  s.enabled = true;
  s.policy = stack_.config.policy;
  s.disk_admit_hits = stack_.config.disk_admit_hits;
  if (stack_.demoted) s.tier_dtype = stack_.config.tier_dtype;
  s.host = stack_.host_stats;
  s.disk = stack_.disk_stats;
  s.remote = stack_.remote_stats;
  if (stack_.host) {
    s.host_enabled = true;
    s.host.capacity_bytes = uint64_t{stack_.host->capacity()} * stack_.block_bytes;
    s.host_area_blocks = stack_.host_area_blocks;
    s.host_blocks_held = stack_.host->host_blocks_held();
    s.host.blocks = stack_.host->size();
    s.host.used_bytes = s.host.blocks * stack_.block_bytes;
  }
  if (stack_.disk) {
    s.disk_enabled = true;
    const DiskTierCounters c = stack_.disk->counters();
    s.disk.capacity_bytes = stack_.config.disk_bytes;
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
  if (stack_.remote) {
    s.remote_enabled = true;
    const RemoteTierCounters c = stack_.remote->counters();
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

std::vector<uint64_t> KvOffload::host_block_hashes() const {
  std::vector<uint64_t> out;
  if (stack_.host)
    stack_.host->for_each_mru([&](uint32_t slot) { out.push_back(stack_.host->meta(slot).key); });
  return out;
}

std::vector<uint64_t> KvOffload::disk_block_hashes() const {
  return stack_.disk ? stack_.disk->keys() : std::vector<uint64_t>{};
}

Status KvOffload::check_integrity() const {
  return stack_.host ? stack_.host->check_integrity() : Status::ok();
}

}  // namespace kvs
