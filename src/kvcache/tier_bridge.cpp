#include "kvcache/tier_bridge.h"

#include <string>

namespace kvs {

TierBridge::TierBridge(uint32_t num_blocks, uint32_t block_size, TierBridgeConfig config)
    : block_size_(block_size), config_(std::move(config)), meta_(num_blocks) {}

uint64_t TierBridge::root_key(std::string_view cache_salt) const {
  return tier_root_key(config_.secrets, config_.tier_namespace, cache_salt);
}

uint64_t TierBridge::salt_check(std::string_view cache_salt) const {
  return tier_salt_check(config_.secrets, cache_salt);
}

std::vector<TierBlockMeta> TierBridge::chain(std::span<const int32_t> prompt,
                                             std::string_view cache_salt,
                                             uint32_t max_blocks) const {
  const uint32_t bs = block_size_;
  std::vector<TierBlockMeta> out;
  const uint64_t check = salt_check(cache_salt);
  uint64_t parent = root_key(cache_salt);
  for (uint64_t pos = 0; pos + bs <= prompt.size() && out.size() < max_blocks; pos += bs) {
    const uint64_t key = tier_block_key(parent, prompt.subspan(pos, bs));
    out.push_back({.key = key, .parent_key = parent, .salt_check = check});
    parent = key;
  }
  return out;
}

void TierBridge::on_cached(BlockId b, const TierBlockMeta& meta, std::span<const int32_t> tokens,
                           bool chain_start, bool computed) {
  KVS_CHECK_MSG(meta_[b.value].key == 0, "a block is cached twice");
  KVS_CHECK_MSG(meta.key != 0, "a cached block without a tier key");
  meta_[b.value] = meta;
  if (computed && config_.log_completed) completed_.push_back(b);
  if (++copies_[meta.key] > 1 || !config_.log_events) return;  // another copy is cached already
  events_.push_back({.stored = true,
                     .key = meta.key,
                     .parent_key = meta.parent_key,
                     .chain_start = chain_start,
                     .tokens = std::vector<int32_t>(tokens.begin(), tokens.end())});
}

void TierBridge::on_erased(BlockId b, std::span<const int32_t> tokens) {
  const TierBlockMeta meta = std::exchange(meta_[b.value], {});
  KVS_CHECK_MSG(meta.key != 0, "a block leaves the cache without a tier identity");
  evicted_.push_back({b, meta, std::vector<int32_t>(tokens.begin(), tokens.end())});
  const auto it = copies_.find(meta.key);
  KVS_CHECK(it != copies_.end());
  if (--it->second > 0) return;
  copies_.erase(it);
  if (config_.log_events) events_.push_back({.stored = false, .key = meta.key});
}

Status TierBridge::check_integrity_of(std::span<const uint8_t> cached) const {
  std::unordered_map<uint64_t, uint32_t> copies;
  for (uint32_t b = 0; b < meta_.size(); ++b) {
    const std::string name = "tier bridge: block " + std::to_string(b);
    if (!cached[b]) {
      if (meta_[b].key != 0 || meta_[b].hits != 0)
        return internal_error(name + " is not cached but keeps a tier identity");
      continue;
    }
    if (meta_[b].key == 0) return internal_error(name + " is cached without a tier identity");
    ++copies[meta_[b].key];
  }
  if (copies != copies_) return internal_error("tier bridge: copy counts per tier key differ");
  return Status::ok();
}

}  // namespace kvs
