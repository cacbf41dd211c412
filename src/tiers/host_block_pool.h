// HostBlockPool: the accounting of a host-memory area of KV blocks (never their bytes): which of
// its blocks are taken. Preemption in swap mode takes one host block per device block of the
// victim and gives them back when the sequence is swapped in or finishes. All or nothing: a
// request for more blocks than are free takes none. O(1) per block.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvs {

class HostBlockPool {
 public:
  explicit HostBlockPool(uint32_t num_blocks);

  [[nodiscard]] uint32_t num_blocks() const { return static_cast<uint32_t>(taken_.size()); }
  [[nodiscard]] uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  [[nodiscard]] uint32_t num_used() const { return num_blocks() - num_free(); }

  // n host blocks, or nullopt (nothing taken) when fewer than n are free.
  [[nodiscard]] std::optional<std::vector<uint32_t>> allocate(uint32_t n);
  // Precondition: every block was allocated and not yet freed.
  void free(std::span<const uint32_t> blocks);

  // Every block is either free (listed once) or taken.
  [[nodiscard]] Status check_integrity() const;

 private:
  std::vector<uint32_t> free_;  // a stack: the most recently freed block is reused first
  std::vector<uint8_t> taken_;
};

}  // namespace kvs
