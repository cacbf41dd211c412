// Tier keys: the keys of blocks in the lower tiers (host RAM, disk, Redis), which must mean the
// same thing in every process that shares a tier (a restart onto the same directory, replicas
// on one Redis) and nothing to anyone else. The in-memory prefix cache keys (block_hash.h) carry
// a per-process random seed; tier keys are a separate chain rooted in the server secret:
//
//   namespace   = H(model fingerprint, K format, V format, block size)      (public)
//   root(salt)  = BLAKE2b[secret root key](namespace, tenant namespace)    (secret-keyed)
//   key(i)      = XXH3(token ids of block i, seed = key(i-1) ^ tag)        key(-1) = root(salt)
//
// The tenant namespace is the server's composition of the tenant identity and the client's
// cache_salt (server/api_keys.h). Without the secret nobody can compute a root, so nobody can
// compute a tier key offline for a prompt (and test guesses against Redis or a directory), and
// processes with different secrets never share a block. Continuing a chain from a known key is
// public (an external indexer that receives a chain's root in a KV event can follow it).
//
// A tier entry stores its key, its parent's key, a salt check (a second, independently keyed
// hash of the tenant namespace) and its token ids; a lookup accepts it only if all of them
// match the walking chain, so a colliding key costs a miss, never wrong KV. What a tier stores
// outside the process is authenticated by a MAC under `mac` (kv_extent.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/server_secret.h"
#include "quant/kv_format.h"

namespace kvs {

// The tiers' keys, derived from the server secret. A default-constructed one (all zero keys) is
// for tests that need no secrecy.
struct TierSecrets {
  SecretKey root{};
  SecretKey salt{};
  SecretKey mac{};
  uint64_t id = 0;  // the secret's public name (ServerSecret::id), stored with every extent
  [[nodiscard]] static TierSecrets of(const ServerSecret& secret);
};

[[nodiscard]] uint64_t tier_namespace(uint64_t model_fingerprint, KvDtype k_dtype, KvDtype v_dtype,
                                      uint32_t block_size);
[[nodiscard]] uint64_t tier_root_key(const TierSecrets& secrets, uint64_t tier_namespace,
                                     std::string_view cache_salt);
// An independent keyed hash of the salt, stored with every tier entry and compared on lookup.
[[nodiscard]] uint64_t tier_salt_check(const TierSecrets& secrets, std::string_view cache_salt);
[[nodiscard]] uint64_t tier_block_key(uint64_t parent_key, std::span<const int32_t> tokens);

// What a tier stores about a block besides its bytes.
struct TierBlockMeta {
  uint64_t key = 0;
  uint64_t parent_key = 0;
  uint64_t salt_check = 0;
  uint32_t hits = 0;  // prefix hits the block has served so far (disk admission)
};

}  // namespace kvs
