#include "kvcache/block_hash.h"

#include <xxhash.h>

#include <string>

#include "core/check.h"

namespace kvs {

namespace {
// Domain tags so that a root key, a block key and a child bucket key never coincide by
// construction.
constexpr uint64_t kExtraKeysTag = 0x6b76732d65787472ULL;     // "kvs-extr"
constexpr uint64_t kRootKeyTag = 0x6b76732d726f6f74ULL;       // "kvs-root"
constexpr uint64_t kChildBucketTag = 0x6b76732d6368696cULL;   // "kvs-chil"
constexpr uint64_t kGroupTag = 0x6b76732d67726f75ULL;         // "kvs-grou"
constexpr uint64_t kSinkTag = 0x6b76732d73696e6bULL;          // "kvs-sink"
constexpr uint64_t kLayerFormatsTag = 0x6b76732d6c666d74ULL;  // "kvs-lfmt"
}  // namespace

uint64_t attention_sink_fingerprint(uint64_t model_fingerprint) {
  return XXH3_64bits_withSeed(&model_fingerprint, sizeof(model_fingerprint), kSinkTag);
}

uint64_t kv_layer_formats_fingerprint(uint64_t model_fingerprint, const KvLayerFormats& formats) {
  KVS_CHECK(!formats.empty());
  // The canonical text names every listed layer and its format; "K:...;V:..." keeps the roles
  // apart.
  const std::string text =
      "K:" + kv_layer_formats_text(formats, 'k') + ";V:" + kv_layer_formats_text(formats, 'v');
  return XXH3_64bits_withSeed(text.data(), text.size(), model_fingerprint ^ kLayerFormatsTag);
}

uint64_t default_block_hash(uint64_t parent_key, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent_key);
}

uint64_t extra_keys_hash(uint64_t model_fingerprint, KvDtype k_dtype, KvDtype v_dtype,
                         uint64_t seed) {
  const uint64_t words[4] = {model_fingerprint, static_cast<uint64_t>(k_dtype),
                             static_cast<uint64_t>(v_dtype), seed};
  return XXH3_64bits_withSeed(words, sizeof(words), kExtraKeysTag);
}

uint64_t root_block_key(uint64_t extra_keys, std::string_view cache_salt) {
  return XXH3_64bits_withSeed(cache_salt.data(), cache_salt.size(), extra_keys ^ kRootKeyTag);
}

uint64_t group_block_key(uint64_t anchor_key, uint32_t group) {
  return XXH3_64bits_withSeed(&group, sizeof(group), anchor_key ^ kGroupTag);
}

uint64_t child_bucket_key(uint64_t parent_key, int32_t first_token) {
  return XXH3_64bits_withSeed(&first_token, sizeof(first_token), parent_key ^ kChildBucketTag);
}

}  // namespace kvs
