#include "server/kv_view_json.h"

#include <unordered_map>

#include "server/response_json.h"

namespace kvs {

using nlohmann::json;

json kv_view_json(const KvView& view, const KvCacheGroups& groups, const TenantLabeler& labeler,
                  bool admin) {
  std::unordered_map<uint32_t, std::string> labels;
  for (const TenantStats& t : view.tenants) labels.emplace(t.id, labeler.label(t.cache_salt));
  const EngineSnapshot& snap = view.engine;
  const KvCacheCounters& c = snap.cache;
  json sequences = json::array();
  for (const KvViewSequence& s : view.sequences) {
    json tables = json::array();
    for (const auto& table : s.tables) {
      json ids = json::array();
      for (const BlockId b : table) ids.push_back(b.is_valid() ? json(b.value) : json(nullptr));
      tables.push_back(std::move(ids));
    }
    json first = tables.empty() ? json::array() : tables.at(0);
    sequences.push_back({{"id", s.seq},
                         {"request", s.request},
                         {"sample", s.sample},
                         {"tokens", s.num_tokens},
                         {"tenant", labeler.label(s.cache_salt)},
                         {"blocks", std::move(first)},
                         {"groups", std::move(tables)}});
  }
  json blocks = json::array();
  for (uint32_t b = 0; b < view.blocks.size(); ++b) {
    const BlockInfo& i = view.blocks[b];
    const char* state = i.state == BlockState::kFree         ? "free"
                        : i.state == BlockState::kCachedFree ? "cached_free"
                                                             : "in_use";
    const bool free = i.state == BlockState::kFree;
    const bool other = !free && i.tenant == kOtherTenantsSlot;
    const auto label = labels.find(i.tenant);
    blocks.push_back(
        {{"id", b},
         {"state", state},
         {"owners", free || other ? json(nullptr) : json(i.refcount)},
         {"tenant", free || label == labels.end() ? json(nullptr) : json(label->second)},
         {"fill", other ? json(nullptr) : json(i.filled)},
         {"hash", i.tier_key != 0 ? json(i.tier_key) : json(nullptr)},
         {"group", free ? json(nullptr) : json(i.group)}});
  }
  json out = {
      {"block_size", c.block_size},
      {"num_blocks", c.num_blocks},
      {"block_bytes", snap.block_bytes},
      {"summary",
       {{"free", c.blocks_free},
        {"cached_free", c.blocks_cached_free},
        {"in_use", c.blocks_in_use},
        {"usage", c.num_blocks > 0 ? static_cast<double>(c.blocks_in_use) / c.num_blocks : 0.0},
        {"fragmentation", snap.fragmentation},
        {"sequences", c.num_sequences}}},
      {"layer_groups", layer_groups_json(groups)},
      {"tiers", offload_json(snap.offload)},
      {"blocks", std::move(blocks)},
      {"sequences", std::move(sequences)},
      {"view_ms", view.unix_ms}};
  // Each tier's blocks by tier key, as KV events name them: hashes, for admins only.
  if (admin) {
    if (snap.offload.host_enabled) out["tiers"]["host"]["block_hashes"] = view.host_block_hashes;
    if (snap.offload.disk_enabled) out["tiers"]["disk"]["block_hashes"] = view.disk_block_hashes;
  }
  return out;
}

}  // namespace kvs
