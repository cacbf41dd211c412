// Block keys of the prefix cache: key(i) = H(key(i-1), token ids of block i), where key(-1), the
// root key, mixes the extra keys: the model fingerprint, the K/V formats and the tenant salt.
// Keys only find candidates quickly; a hit is always confirmed against the stored token ids and
// the parent block (prefix_cache.h), so a collision costs a miss, never wrong KV.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "quant/kv_format.h"
#include "quant/kv_layer_formats.h"

namespace kvs {

// Hash of one full block chained from its parent's key.
using BlockHashFn = uint64_t (*)(uint64_t parent_key, std::span<const int32_t> tokens);

// XXH3-64 of the token bytes, seeded with the parent key.
[[nodiscard]] uint64_t default_block_hash(uint64_t parent_key, std::span<const int32_t> tokens);

// The extra keys every block of this model and KV format carries, and the per-process seed
// (KvCacheConfig::hash_seed) that keeps keys unpredictable from outside.
[[nodiscard]] uint64_t extra_keys_hash(uint64_t model_fingerprint, KvDtype k_dtype, KvDtype v_dtype,
                                       uint64_t seed = 0);

// The fingerprint of a model whose cache is written with the attention sink
// (quant/attention_sink.h): its blocks hold other bytes than the same tokens' without it.
[[nodiscard]] uint64_t attention_sink_fingerprint(uint64_t model_fingerprint);
// The fingerprint of a model whose cache stores some layers' K or V in their own formats
// (quant/kv_layer_formats.h): its blocks are laid out and computed differently. `formats` must
// not be empty (a pool without them keeps its fingerprint).
[[nodiscard]] uint64_t kv_layer_formats_fingerprint(uint64_t model_fingerprint,
                                                    const KvLayerFormats& formats);

// Key of the (virtual) parent of a tenant's first block.
[[nodiscard]] uint64_t root_block_key(uint64_t extra_keys, std::string_view cache_salt);

// Key of group g's block at a chain position whose key (in group 0's chain) is `anchor_key`.
// Groups other than 0 are not chained through their own blocks (a sliding group releases its old
// ones): their entries hang off group 0's block at the same position (kv_cache_manager.h).
[[nodiscard]] uint64_t group_block_key(uint64_t anchor_key, uint32_t group);

// Key of the bucket of a parent's children starting with `first_token` (partial matches).
[[nodiscard]] uint64_t child_bucket_key(uint64_t parent_key, int32_t first_token);

}  // namespace kvs
