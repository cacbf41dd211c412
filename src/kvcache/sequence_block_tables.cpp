#include "kvcache/sequence_block_tables.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace kvs {

namespace {
uint32_t ceil_div(uint64_t a, uint32_t b) { return static_cast<uint32_t>((a + b - 1) / b); }
}  // namespace

SeqBlocks& SequenceBlockTables::insert(SeqId seq, SeqBlocks blocks) {
  KVS_CHECK(blocks.tables.size() == num_groups());
  const auto [it, added] = seqs_.try_emplace(seq, std::move(blocks));
  KVS_CHECK_MSG(added, "a sequence inserted twice into the block tables");
  return it->second;
}

SeqBlocks& SequenceBlockTables::at(SeqId seq) {
  const auto it = seqs_.find(seq);
  KVS_CHECK_MSG(it != seqs_.end(), "unknown sequence");
  return it->second;
}

const SeqBlocks& SequenceBlockTables::at(SeqId seq) const {
  const auto it = seqs_.find(seq);
  KVS_CHECK_MSG(it != seqs_.end(), "unknown sequence");
  return it->second;
}

std::vector<BlockId> SequenceBlockTables::resident_blocks(SeqId seq) const {
  std::vector<BlockId> out;
  for (const BlockTable& table : at(seq).tables)
    for (BlockId b : table.blocks())
      if (b.is_valid()) out.push_back(b);
  return out;
}

uint64_t SequenceBlockTables::slot(SeqId seq, uint32_t pos) const {
  const SeqBlocks& s = at(seq);
  KVS_CHECK(pos < s.num_tokens());
  return s.tables[0].slot(pos);
}

void SequenceBlockTables::build_step_inputs(std::span<const StepRow> rows, StepInputs* out) const {
  const uint32_t bs = block_size_;
  const uint32_t groups = num_groups();
  uint32_t max_blocks = 0, tokens = 0;
  for (const StepRow& r : rows) {
    max_blocks = std::max(max_blocks, ceil_div(uint64_t{r.first_pos} + r.num_tokens, bs));
    tokens += r.num_tokens;
  }
  out->num_groups = groups;
  out->num_tokens = tokens;
  out->max_blocks_per_seq = max_blocks;
  out->context_lens.clear();
  out->slot_mapping.clear();
  out->slot_mapping.reserve(size_t{groups} * tokens);
  out->block_tables.assign(size_t{groups} * rows.size() * max_blocks, 0);
  for (const StepRow& r : rows) out->context_lens.push_back(r.first_pos + r.num_tokens);
  for (uint32_t g = 0; g < groups; ++g) {
    for (size_t i = 0; i < rows.size(); ++i) {
      const StepRow& r = rows[i];
      const BlockTable& table = at(r.seq).tables[g];
      uint32_t* row = out->block_tables.data() + (size_t{g} * rows.size() + i) * max_blocks;
      const std::span<const BlockId> blocks = table.blocks();
      for (uint32_t j = 0; j < ceil_div(out->context_lens[i], bs); ++j)
        row[j] = blocks[j].is_valid() ? blocks[j].value : 0;
      table.append_slot_mapping(r.first_pos, r.num_tokens, &out->slot_mapping);
    }
  }
}

Status SequenceBlockTables::check_integrity(uint32_t num_blocks,
                                            std::vector<uint32_t>* refs) const {
  const uint32_t bs = block_size_;
  for (const auto& [id, s] : seqs_) {
    const std::string name = "sequence " + std::to_string(id.value);
    if (s.tables.size() != num_groups()) return internal_error(name + ": one table per group");
    const uint32_t tokens = s.tables[0].num_tokens();
    if (s.num_committed > tokens)
      return internal_error(name + ": more tokens committed than appended");
    if (s.partial_tokens.size() != s.num_committed % bs)
      return internal_error(name + ": staged token ids do not match the committed count");
    for (uint32_t g = 0; g < num_groups(); ++g) {
      const BlockTable& table = s.tables[g];
      const std::string where = name + ", group " + std::to_string(g);
      if (table.num_tokens() != tokens)
        return internal_error(where + ": token count differs from group 0");
      if (table.num_blocks() != ceil_div(table.num_tokens(), bs))
        return internal_error(where + ": block count does not match its token count");
      // Released blocks (invalid entries) only in sliding groups, only before the window of
      // the step that appended the last slots, and only as a prefix.
      bool released = true;
      for (uint32_t j = 0; j < table.num_blocks(); ++j) {
        const BlockId b = table.block(j);
        if (!b.is_valid()) {
          if (!released) return internal_error(where + ": a released block after a held one");
          if (windows_[g] == 0) return internal_error(where + ": a full group released a block");
          if ((uint64_t{j} + 1) * bs + windows_[g] > uint64_t{tokens} + 1)
            return internal_error(where + ": a block inside the window was released");
          continue;
        }
        released = false;
        if (b.value >= num_blocks) return internal_error(where + ": invalid block id");
        if (refs != nullptr) ++(*refs)[b.value];
      }
    }
  }
  return Status::ok();
}

}  // namespace kvs
