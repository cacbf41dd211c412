// SequenceBlockTables: the block tables of every live sequence, and what the forward pass reads
// from them. Pure accounting (block ids, never bytes); the cache manager decides which blocks go
// in, this object holds them and answers the per-sequence queries.
//
// Per sequence: one BlockTable per layer group (kv_cache_groups.h; one group for uniform models)
// and two counters shared by all groups,
//   num_committed <= num_tokens <= blocks * block_size,
// num_tokens = token slots appended, num_committed = slots whose KV is written and whose token
// ids are known. At most the last block of a table is partly filled. A sliding-window group's
// table keeps an entry per block position, but the blocks before the window are released (the
// entry becomes BlockId::invalid()), only ever as a prefix of the table.
//
// Thread safety: none; the engine's step loop owns it (through the cache manager).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kvcache/block_pool.h"
#include "kvcache/block_table.h"
#include "kvcache/prefix_cache.h"

namespace kvs {

struct SeqId {
  uint64_t value = 0;
  friend constexpr bool operator==(SeqId, SeqId) = default;
};

}  // namespace kvs

template <>
struct std::hash<kvs::SeqId> {
  size_t operator()(kvs::SeqId s) const noexcept { return std::hash<uint64_t>()(s.value); }
};

namespace kvs {

// One row of a step: the sequence computes positions [first_pos, first_pos + num_tokens)
// this step (slots already appended), attending to all positions < first_pos + num_tokens.
struct StepRow {
  SeqId seq;
  uint32_t first_pos = 0;
  uint32_t num_tokens = 0;
};

// The forward pass's plain arrays for one step, built once per step by build_step_inputs from
// the step's rows (in row order). Each layer group has its own blocks, so its own slots.
struct StepInputs {
  uint32_t num_groups = 0;
  uint32_t num_tokens = 0;  // sum of the rows' num_tokens
  // [num_groups][num_tokens]: the KV slot of each new token, in order, in each group.
  std::vector<int64_t> slot_mapping;
  std::vector<uint32_t> context_lens;  // [num_rows]: first_pos + num_tokens
  // [num_groups][num_rows][max_blocks_per_seq] BlockId values, row-major; entries past a row's
  // ceil(context_len / block_size) blocks, and a sliding group's released blocks, are 0 and must
  // not be read (a windowed attention never reaches them).
  std::vector<uint32_t> block_tables;
  uint32_t max_blocks_per_seq = 0;

  [[nodiscard]] const int64_t* slots(uint32_t group) const {
    return slot_mapping.data() + size_t{group} * num_tokens;
  }
  [[nodiscard]] const uint32_t* table(uint32_t group, size_t row) const {
    return block_tables.data() + (size_t{group} * context_lens.size() + row) * max_blocks_per_seq;
  }
};

// One sequence's tables and prefix-chain state.
struct SeqBlocks {
  SeqBlocks(TenantId t, uint32_t block_size, uint32_t groups)
      : tenant(t), tables(groups, BlockTable(block_size)) {}
  TenantId tenant;
  std::vector<BlockTable> tables;  // per group; all have the same num_tokens
  uint32_t num_committed = 0;
  // Chain state of the last full committed block (group 0): its key and the cached block that
  // stands for that prefix in the cache (none if the prefix is not cached).
  uint64_t last_key = 0;
  BlockRef last_ref;
  // The same position's tier key (tier_key.h) and the tenant's salt check (config.tier_keys).
  uint64_t last_tier_key = 0;
  uint64_t salt_check = 0;
  // Blocks that end past this many tokens never become prefix-cache entries (admit).
  uint32_t cacheable_tokens = UINT32_MAX;
  // Token ids of the committed slots of the last, partly filled block.
  std::vector<int32_t> partial_tokens;

  [[nodiscard]] uint32_t num_tokens() const { return tables[0].num_tokens(); }
};

class SequenceBlockTables {
 public:
  // group_windows: per layer group, 0 = full attention, else its sliding window in tokens.
  SequenceBlockTables(uint32_t block_size, std::vector<uint32_t> group_windows)
      : block_size_(block_size), windows_(std::move(group_windows)) {}

  [[nodiscard]] uint32_t num_groups() const { return static_cast<uint32_t>(windows_.size()); }
  [[nodiscard]] size_t size() const { return seqs_.size(); }
  [[nodiscard]] bool contains(SeqId seq) const { return seqs_.contains(seq); }
  // Adds a sequence's tables (precondition: seq unknown).
  SeqBlocks& insert(SeqId seq, SeqBlocks blocks);
  // Null when seq is unknown.
  [[nodiscard]] SeqBlocks* find(SeqId seq) {
    const auto it = seqs_.find(seq);
    return it == seqs_.end() ? nullptr : &it->second;
  }
  // Precondition for both: seq known (a CHECK names it otherwise).
  [[nodiscard]] SeqBlocks& at(SeqId seq);
  [[nodiscard]] const SeqBlocks& at(SeqId seq) const;
  void erase(SeqId seq) { seqs_.erase(seq); }
  [[nodiscard]] const std::unordered_map<SeqId, SeqBlocks>& all() const { return seqs_; }

  // Group `group`'s table: one entry per block position; released sliding blocks are invalid.
  [[nodiscard]] std::span<const BlockId> block_table(SeqId seq, uint32_t group = 0) const {
    return at(seq).tables.at(group).blocks();
  }
  // Every block the sequence holds, group by group in position order (the order swap-out copies
  // and admit_restored re-creates).
  [[nodiscard]] std::vector<BlockId> resident_blocks(SeqId seq) const;
  [[nodiscard]] uint32_t num_tokens(SeqId seq) const { return at(seq).num_tokens(); }
  [[nodiscard]] uint32_t num_committed(SeqId seq) const { return at(seq).num_committed; }
  // Slot index of position pos of seq in group 0 (precondition: pos < num_tokens(seq)).
  [[nodiscard]] uint64_t slot(SeqId seq, uint32_t pos) const;
  // Fills `out` (reusing its capacity) for one engine step.
  void build_step_inputs(std::span<const StepRow> rows, StepInputs* out) const;

  // The tables' own invariants (one table per group, equal token counts, block counts that
  // match them, staged token ids, released blocks only as a prefix of a sliding group's table
  // and only before its window, block ids < num_blocks); adds one reference per held block to
  // (*refs)[block] for the pool's check. An error names the sequence and group.
  [[nodiscard]] Status check_integrity(uint32_t num_blocks, std::vector<uint32_t>* refs) const;

 private:
  uint32_t block_size_;
  std::vector<uint32_t> windows_;
  std::unordered_map<SeqId, SeqBlocks> seqs_;
};

}  // namespace kvs
