// KV events in vLLM's wire format (vllm/distributed/kv_events.py, v0.26 and later), which llm-d's
// precise prefix-cache scorer and NVIDIA Dynamo's KV router consume:
//
//   payload = msgpack KVEventBatch, an array [ts (float64), events, data_parallel_rank]
//   event   = a msgpack map tagged by "type", fields in the source's order, None-valued optional
//             fields left out (msgspec's tag=True, omit_defaults=True):
//     {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64 | nil,
//      "token_ids": [int...], "block_size": int, "lora_id": nil, "medium": str,
//      "lora_name": nil, "extra_keys": [[root] | nil, ...] (only when a chain starts here),
//      "group_idx": 0, "kv_cache_spec_kind": "full_attention"}
//     {"type": "BlockRemoved", "block_hashes": [u64...], "medium": str, "group_idx": 0}
//     {"type": "AllBlocksCleared"}
//
// Block hashes are kvserve's tier keys (kvcache/tier_key.h), which an external indexer can
// compute from token ids: key = XXH3-64(token ids as little-endian int32, seed = parent key ^
// 0x6b76732d74697262). A chain's first block has parent_block_hash nil and its extra_keys entry
// holds the chain's root key (model, formats, block size and tenant salt hashed together), the
// parent of its key. docs/scale-out.md has the details and the medium names.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvcache/prefix_cache.h"

namespace kvs {

// Where a block is: vLLM's medium strings. The pool is "GPU" whatever the device (routers score
// it as the engine's own cache).
inline constexpr const char* kMediumPool = "GPU";
inline constexpr const char* kMediumHost = "CPU";  // the host tier (L2), as vLLM's CPU offload
inline constexpr const char* kMediumDisk =
    "STORAGE";  // the disk tier (L3), as vLLM's storage tiers

struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kStored;
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent;      // stored: nil when the first block starts a chain
  std::optional<uint64_t> chain_root;  // stored: the first block's root key (its extra_keys)
  std::vector<int32_t> token_ids;      // stored: block_size per block, concatenated
  std::string medium = kMediumPool;
};

// One step's cache changes as vLLM events: consecutive stored blocks that extend one chain
// become one BlockStored, consecutive removals one BlockRemoved.
[[nodiscard]] std::vector<KvEvent> kv_events_of(std::span<const CacheEvent> changes,
                                                const char* medium);

// The msgpack payload of one KVEventBatch.
[[nodiscard]] std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events,
                                                uint32_t block_size, int32_t data_parallel_rank);

}  // namespace kvs
