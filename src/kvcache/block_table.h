// BlockTable: the blocks of one sequence, in order, and how many token slots are appended.
// Invariant: num_tokens <= blocks.size() * block_size and blocks.size() == ceil(num_tokens /
// block_size) once append_slots returns, so at most the last block is partly filled.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "core/check.h"
#include "kvcache/block_pool.h"

namespace kvs {

class BlockTable {
 public:
  explicit BlockTable(uint32_t block_size) : block_size_(block_size) {}

  [[nodiscard]] uint32_t block_size() const { return block_size_; }
  [[nodiscard]] std::span<const BlockId> blocks() const { return blocks_; }
  [[nodiscard]] uint32_t num_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  [[nodiscard]] uint32_t num_tokens() const { return num_tokens_; }
  [[nodiscard]] BlockId block(uint32_t i) const { return blocks_[i]; }
  // Tokens in the last block (0 if it is full or there is none).
  [[nodiscard]] uint32_t partial_tokens() const { return num_tokens_ % block_size_; }
  // Blocks to add to hold num_tokens more slots (not counting a copy-on-write copy).
  [[nodiscard]] uint32_t blocks_to_add(uint32_t num_tokens) const {
    const uint64_t total = uint64_t{num_tokens_} + num_tokens;
    const uint64_t need = (total + block_size_ - 1) / block_size_;
    return need > blocks_.size() ? static_cast<uint32_t>(need - blocks_.size()) : 0;
  }

  void push_block(BlockId b) { blocks_.push_back(b); }
  void set_block(uint32_t i, BlockId b) { blocks_[i] = b; }
  void add_tokens(uint32_t n) {
    num_tokens_ += n;
    KVS_DCHECK(uint64_t{num_tokens_} <= uint64_t{block_size_} * blocks_.size());
  }

  [[nodiscard]] uint64_t slot(uint32_t pos) const {
    KVS_DCHECK(pos < num_tokens_);
    return uint64_t{blocks_[pos / block_size_].value} * block_size_ + pos % block_size_;
  }
  // Appends the slots of positions [first_pos, first_pos + n) to out.
  void append_slot_mapping(uint32_t first_pos, uint32_t n, std::vector<int64_t>* out) const;

 private:
  uint32_t block_size_;
  uint32_t num_tokens_ = 0;
  std::vector<BlockId> blocks_;
};

}  // namespace kvs
