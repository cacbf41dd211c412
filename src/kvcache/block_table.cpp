#include "kvcache/block_table.h"

namespace kvs {

void BlockTable::append_slot_mapping(uint32_t first_pos, uint32_t n,
                                     std::vector<int64_t>* out) const {
  KVS_CHECK(uint64_t{first_pos} + n <= num_tokens_);
  uint32_t pos = first_pos;
  const uint32_t end = first_pos + n;
  while (pos < end) {
    // One block at a time: consecutive positions of a block have consecutive slots.
    const uint32_t in_block = pos % block_size_;
    const uint32_t run = std::min(block_size_ - in_block, end - pos);
    const int64_t base = int64_t{blocks_[pos / block_size_].value} * block_size_ + in_block;
    for (uint32_t i = 0; i < run; ++i) out->push_back(base + i);
    pos += run;
  }
}

}  // namespace kvs
