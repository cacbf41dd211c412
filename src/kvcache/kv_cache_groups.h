// KvCacheGroups: how a model's layers share one block pool when they do not all attend the same
// way (vLLM's hybrid allocator is the reference design). Layers of one attention kind (full, or
// sliding with one window) are cut into groups of `layers_per_group` layers (the gcd of the
// kinds' layer counts), full groups first. Every block of the pool then has the same size and
// holds one group's layers for block_size tokens, and every sequence has one block table per
// group:
//   full group      holds a block for every block of the sequence;
//   sliding group   holds only the blocks a step can read: the window before the step's first
//                   position and the step's own positions (kv_cache_manager.h); older blocks go
//                   back to the pool (cached-free when keyed) as the sequence grows.
// A uniform model (every layer full) is one group of all its layers: one block per block_size
// tokens of all layers, as before groups existed.
//
// Gemma 3 270M: 3 full + 15 sliding (window 512) layers -> 6 groups of 3 (group 0 full).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

// Where a model layer's K/V live: its group and its index among the group's layers.
struct KvLayerSlot {
  uint32_t group = 0;
  uint32_t index = 0;
};

struct KvCacheGroups {
  uint32_t layers_per_group = 0;
  std::vector<uint32_t> windows;         // per group: 0 = full attention, else the window
  std::vector<KvLayerSlot> layer_slots;  // per model layer

  [[nodiscard]] uint32_t num_groups() const { return static_cast<uint32_t>(windows.size()); }
  [[nodiscard]] bool uniform() const { return windows.size() == 1 && windows[0] == 0; }

  // One full group of all `layers`.
  [[nodiscard]] static KvCacheGroups single(uint32_t layers);
  // Groups for a model's layers: only kFull and kSliding layers, all with the same per-layer
  // bytes (heads and head dims); invalid_argument naming the layer otherwise.
  [[nodiscard]] static Result<KvCacheGroups> of_layers(std::span<const KvLayer> layers);
};

// The positions a sliding layer must hold while a step computes positions [first, end) of a
// sequence: every query q in the step attends to keys [q - window + 1, q], so the keys from
// first - window + 1 on. The block index of the first position held (blocks before it can be
// released): floor(max(0, first - window + 1) / block_size). Full groups (window 0) hold from 0.
[[nodiscard]] uint32_t first_held_block(uint32_t window, uint32_t first, uint32_t block_size);

}  // namespace kvs
