// KvView: what the dashboard needs of the KV pool at one instant, copied on the engine thread
// (EngineWorker::run_on_engine) and read on the publisher thread. Taking it is a copy of plain
// arrays through the Engine facade: every block's state, refcount, tenant and fill, every live
// sequence's block table, the tenants and the O(1) counters; O(blocks + table entries). All
// formatting (packing cells, labels, diffs, JSON) happens later, off the engine thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvs {

struct KvViewSequence {
  uint64_t seq = 0;
  uint64_t request = 0;  // the request id (its first sequence)
  uint32_t sample = 0;
  uint32_t num_tokens = 0;
  std::string cache_salt;  // labelled (TenantLabeler) before it leaves the process
  // Per layer group, block-table order (SequenceBlocks::tables); a sliding group's released
  // entries, always the leading ones, are BlockId::invalid().
  std::vector<std::vector<BlockId>> tables;
};

struct KvView {
  int64_t unix_ms = 0;   // wall clock when taken (the page measures update latency against it)
  uint32_t take_us = 0;  // time the engine thread spent taking it
  std::vector<BlockInfo> blocks;
  std::vector<KvViewSequence> sequences;  // ascending seq
  std::vector<TenantStats> tenants;
  EngineSnapshot engine;
  uint64_t steps = 0;  // engine steps so far (an update can only be taken between two)
};

// Call on the engine thread.
[[nodiscard]] KvView take_kv_view(const Engine& engine);

}  // namespace kvs
