// Tier keys: the keys of blocks in the lower tiers (host RAM, disk), which must mean the same
// thing in every process that shares a tier directory, across restarts. The in-memory prefix
// cache keys (block_hash.h) carry a per-process random seed so that clients cannot predict them;
// tier keys cannot, so they are a separate chain with a fixed namespace:
//
//   namespace   = H(model fingerprint, K format, V format, block size)   (no seed)
//   root(salt)  = H(namespace, tenant salt)
//   key(i)      = H(key(i-1), token ids of block i)                       key(-1) = root(salt)
//
// A tier entry stores its key, its parent's key, a salt check and its token ids; a lookup accepts
// it only if all of them match the walking chain, so a predictable (or colliding) key costs a miss,
// never wrong KV. Salts never share: different salts give different roots, and the salt check is
// a second, independent hash of the salt.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "quant/kv_format.h"

namespace kvs {

[[nodiscard]] uint64_t tier_namespace(uint64_t model_fingerprint, KvDtype k_dtype, KvDtype v_dtype,
                                      uint32_t block_size);
[[nodiscard]] uint64_t tier_root_key(uint64_t tier_namespace, std::string_view cache_salt);
// An independent hash of the salt, stored with every tier entry and compared on lookup.
[[nodiscard]] uint64_t tier_salt_check(std::string_view cache_salt);
[[nodiscard]] uint64_t tier_block_key(uint64_t parent_key, std::span<const int32_t> tokens);

// What a tier stores about a block besides its bytes.
struct TierBlockMeta {
  uint64_t key = 0;
  uint64_t parent_key = 0;
  uint64_t salt_check = 0;
  uint32_t hits = 0;  // prefix hits the block has served so far (disk admission)
};

}  // namespace kvs
