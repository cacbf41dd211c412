#include "tiers/tier_stores.h"

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

TierStores::TierStores(TierStack& stack, std::optional<KvBlockTranscoder> transcoder)
    : t_(stack), transcoder_(std::move(transcoder)) {
  if (transcoder_) scratch_.resize(t_.block_bytes);
}

void TierStores::store(const KvBlockStorage& device, uint32_t block, uint32_t slot) {
  if (transcoder_)
    transcoder_->encode(device.block_data(block), slot_data(slot));
  else
    std::memcpy(slot_data(slot), device.block_data(block), t_.block_bytes);
}

void TierStores::load(KvBlockStorage& device, uint32_t slot, uint32_t block) {
  const auto t0 = SteadyClock::now();
  if (transcoder_)
    transcoder_->decode(slot_data(slot), device.mutable_block_data(block));
  else
    device.write_block(block, slot_data(slot));
  TierStack::record_load(t_.host_stats, seconds_since(t0), t_.block_bytes);
}

void TierStores::demote_slot(uint32_t slot, const TierRecord& record) {
  KVS_CHECK(t_.disk != nullptr);
  if (t_.disk->add(record.meta, record.tokens, slot_data(slot))) ++t_.disk_added_this_step;
}

void TierStores::demote_block(const KvBlockStorage& device, uint32_t block,
                              const TierRecord& record) {
  KVS_CHECK(t_.disk != nullptr);
  if (t_.disk->add(record.meta, record.tokens, tier_bytes_of(device, block)))
    ++t_.disk_added_this_step;
}

void TierStores::store_remote(const KvBlockStorage& device, uint32_t block,
                              const TierRecord& record) {
  KVS_CHECK(t_.remote != nullptr);
  t_.remote->put(record.meta, record.tokens, tier_bytes_of(device, block));
}

void TierStores::load_verified(KvBlockStorage& device, const VerifiedBlock& read, uint32_t block) {
  KVS_CHECK(read.buffer != nullptr && read.bytes == t_.block_bytes &&
            read.offset + read.bytes <= read.buffer->size());
  if (transcoder_)
    transcoder_->decode(read.data(), device.mutable_block_data(block));
  else
    device.write_block(block, read.data());
}

bool TierStores::persist(const KvBlockStorage& device, const KvCacheManager& cache,
                         double timeout_seconds) {
  // The remote tier's queued writes go first (bounded by its timeout).
  if (t_.remote)
    t_.remote->flush(std::min(timeout_seconds, 4.0 * t_.config.remote_timeout_ms / 1000.0 + 0.5));
  if (!t_.disk) return true;
  if (t_.host) {
    t_.host->for_each_mru([&](uint32_t slot) {
      if (t_.admits_to_disk(t_.host->meta(slot)))
        t_.disk->add(t_.host->meta(slot), t_.host->tokens(slot), slot_data(slot));
    });
  }
  for (BlockId b : cache.cached_blocks()) {
    const TierBlockMeta& meta = cache.tier_meta(b);
    if (t_.admits_to_disk(meta))
      t_.disk->add(meta, cache.cached_tokens_of(b), tier_bytes_of(device, b.value));
  }
  return t_.disk->flush(timeout_seconds);
}

uint8_t* TierStores::slot_data(uint32_t slot) const {
  const uint32_t per = t_.host->slots_per_block();
  return t_.host_storage->mutable_block_data(slot / per) + (slot % per) * t_.block_bytes;
}

const uint8_t* TierStores::tier_bytes_of(const KvBlockStorage& device, uint32_t block) {
  if (!transcoder_) return device.block_data(block);
  transcoder_->encode(device.block_data(block), scratch_.data());
  return scratch_.data();
}

void TierStores::measure_startup_bandwidth() {
  // Host: copies of a few blocks' worth of bytes (what a kTierLoad does).
  const size_t bytes = static_cast<size_t>(std::min<uint64_t>(t_.block_bytes * 8, 64 << 20));
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  auto t0 = SteadyClock::now();
  for (int i = 0; i < 4; ++i) std::memcpy(b.data(), a.data(), bytes);
  t_.host_stats.load_bytes_per_s = 4.0 * bytes / std::max(seconds_since(t0), 1e-9);
  if (t_.remote) t_.remote_stats.load_bytes_per_s = t_.remote->startup_bytes_per_s();
  if (!t_.disk) return;
  // Disk: a probe file written and read back (a temporary file of the tier's directory, created
  // as extents are: exclusively, under a random name, never through a link).
  t_.disk_stats.load_bytes_per_s = t_.disk->measure_read_bandwidth(bytes);
}

}  // namespace kvs
