#include "kvcache/tier_key.h"

#include <xxhash.h>

namespace kvs {

namespace {
// Domain tags, distinct from block_hash.cpp's, so a tier key never equals an in-memory key by
// construction.
// The namespace tag changes when what a stored block may hold changes, so that entries written
// before are never matched: "kvs-tir2" since blocks computed reading a recent-token window (above
// their sequence's floor) are no longer prefix-cache entries, so never stored.
constexpr uint64_t kNamespaceTag = 0x6b76732d74697232ULL;  // "kvs-tir2"
constexpr uint64_t kBlockTag = 0x6b76732d74697262ULL;      // "kvs-tirb"
}  // namespace

TierSecrets TierSecrets::of(const ServerSecret& secret) {
  return {.root = secret.derive("kvstroot"),
          .salt = secret.derive("kvstsalt"),
          .mac = secret.derive("kvstmac1"),
          .id = secret.id()};
}

uint64_t tier_namespace(uint64_t model_fingerprint, KvDtype k_dtype, KvDtype v_dtype,
                        uint32_t block_size) {
  const uint64_t words[4] = {model_fingerprint, static_cast<uint64_t>(k_dtype),
                             static_cast<uint64_t>(v_dtype), block_size};
  return XXH3_64bits_withSeed(words, sizeof(words), kNamespaceTag);
}

uint64_t tier_root_key(const TierSecrets& secrets, uint64_t ns, std::string_view cache_salt) {
  return keyed_hash64(secrets.root, {std::span(reinterpret_cast<const uint8_t*>(&ns), sizeof ns),
                                     as_bytes(cache_salt)});
}

uint64_t tier_salt_check(const TierSecrets& secrets, std::string_view cache_salt) {
  return keyed_hash64(secrets.salt, {as_bytes(cache_salt)});
}

uint64_t tier_block_key(uint64_t parent_key, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_key ^ kBlockTag);
}

}  // namespace kvs
