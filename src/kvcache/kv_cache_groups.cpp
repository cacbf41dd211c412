#include "kvcache/kv_cache_groups.h"

#include <map>
#include <numeric>
#include <string>

namespace kvs {

KvCacheGroups KvCacheGroups::single(uint32_t layers) {
  KvCacheGroups g;
  g.layers_per_group = layers;
  g.windows = {0};
  for (uint32_t l = 0; l < layers; ++l) g.layer_slots.push_back({.group = 0, .index = l});
  return g;
}

Result<KvCacheGroups> KvCacheGroups::of_layers(std::span<const KvLayer> layers) {
  if (layers.empty()) return invalid_argument("the model has no layers");
  const KvLayer& first = layers.front();
  // Layers of each window (0 = full), full first, in layer order.
  std::map<uint32_t, std::vector<uint32_t>> by_window;
  for (uint32_t l = 0; l < layers.size(); ++l) {
    const KvLayer& x = layers[l];
    if (x.kind != KvLayerKind::kFull && x.kind != KvLayerKind::kSliding)
      return invalid_argument("layer " + std::to_string(l) + " (" + kv_layer_kind_name(x.kind) +
                              ") has no paged K/V");
    if (x.kv_heads != first.kv_heads || x.head_dim_k != first.head_dim_k ||
        x.head_dim_v != first.head_dim_v)
      return invalid_argument("layer " + std::to_string(l) +
                              " has other KV heads or head dims than layer 0: one block pool "
                              "needs equal layers");
    by_window[x.kind == KvLayerKind::kFull ? 0 : x.window].push_back(l);
  }
  uint32_t per_group = 0;
  for (const auto& [window, ls] : by_window)
    per_group = std::gcd(per_group, static_cast<uint32_t>(ls.size()));
  KvCacheGroups g;
  g.layers_per_group = per_group;
  g.layer_slots.resize(layers.size());
  for (const auto& [window, ls] : by_window) {
    for (size_t i = 0; i < ls.size(); ++i) {
      if (i % per_group == 0) g.windows.push_back(window);
      g.layer_slots[ls[i]] = {.group = static_cast<uint32_t>(g.windows.size() - 1),
                              .index = static_cast<uint32_t>(i % per_group)};
    }
  }
  return g;
}

uint32_t first_held_block(uint32_t window, uint32_t first, uint32_t block_size) {
  if (window == 0 || first < window) return 0;
  return (first - window + 1) / block_size;
}

}  // namespace kvs
