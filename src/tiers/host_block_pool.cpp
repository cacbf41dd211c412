#include "tiers/host_block_pool.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace kvs {

HostBlockPool::HostBlockPool(uint32_t num_blocks) : taken_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (uint32_t b = num_blocks; b-- > 0;) free_.push_back(b);  // hands out 0, 1, 2, ...
}

std::optional<std::vector<uint32_t>> HostBlockPool::allocate(uint32_t n) {
  if (n > free_.size()) return std::nullopt;
  std::vector<uint32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  std::reverse(out.begin(), out.end());
  for (uint32_t b : out) taken_[b] = 1;
  return out;
}

void HostBlockPool::free(std::span<const uint32_t> blocks) {
  for (size_t i = blocks.size(); i-- > 0;) {
    const uint32_t b = blocks[i];
    KVS_CHECK_MSG(b < taken_.size() && taken_[b] != 0, "freeing a host block that is not taken");
    taken_[b] = 0;
    free_.push_back(b);
  }
}

Status HostBlockPool::check_integrity() const {
  std::vector<uint8_t> listed(taken_.size(), 0);
  for (uint32_t b : free_) {
    if (b >= taken_.size()) return internal_error("host pool: free list holds an invalid block");
    if (listed[b]++ != 0)
      return internal_error("host pool: block " + std::to_string(b) + " is on the free list twice");
    if (taken_[b] != 0)
      return internal_error("host pool: block " + std::to_string(b) + " is free and taken");
  }
  uint32_t taken = 0;
  for (uint8_t t : taken_) taken += t;
  if (taken + free_.size() != taken_.size())
    return internal_error("host pool: a block is neither free nor taken");
  return Status::ok();
}

}  // namespace kvs
