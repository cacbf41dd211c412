// KvView: what the dashboard, /v1/kv and /metrics need of the KV pool at one instant, copied on
// the engine thread (EngineWorker::run_on_engine, at most once per KvViewCache interval) and read
// on other threads. Taking it is a copy of plain arrays through the Engine facade: every block's
// state, refcount, tenant, fill and tier key, every live sequence's block table, the tenants, the
// tiers' block lists and the counters; O(blocks + table entries). All formatting (packing cells,
// labels, diffs, JSON) happens later, off the engine thread.
//
// Views are scoped to who asks (scoped_kv_view): an admin (or a keyless server's caller) sees
// everything; a tenant sees its own sequences and blocks, every other tenant's occupancy only as
// one anonymous pseudo-tenant ("other": no request, owner count, fill or key), and no block
// hashes (they would allow offline dictionary tests of prompts).
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
  EngineSnapshot engine;  // with fragmentation
  uint64_t steps = 0;     // engine steps so far (an update can only be taken between two)
  std::vector<uint64_t> host_block_hashes, disk_block_hashes;  // the tiers' blocks by tier key
};

// Who looks at a view.
struct ViewScope {
  std::string tenant;  // the caller's tenant identity (api_keys.h)
  bool admin = false;  // sees every tenant and the block hashes
};

// The pseudo-tenant every other tenant's blocks belong to in a scoped view: its slot and its
// namespace (no request's namespace, which always holds a \x1f, can equal it); TenantLabeler
// labels it "other".
inline constexpr uint32_t kOtherTenantsSlot = (1u << 20) - 1;
inline constexpr const char* kOtherTenantsNamespace = "\x1e";

// Call on the engine thread.
[[nodiscard]] KvView take_kv_view(const Engine& engine);
// The view as `scope` may see it (a copy; an admin's is the view itself).
[[nodiscard]] KvView scoped_kv_view(const KvView& view, const ViewScope& scope);

}  // namespace kvs
