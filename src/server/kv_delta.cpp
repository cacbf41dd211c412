#include "server/kv_delta.h"

#include <algorithm>

#include "core/check.h"

namespace kvs {

uint32_t pack_cell(CellState state, bool shared, uint32_t fill, uint32_t tenant) {
  if (state == CellState::kFree) return 0;
  return static_cast<uint32_t>(state) | (shared ? 4u : 0u) | (std::min(fill, kCellMaxFill) << 3) |
         (std::min(tenant, kCellMaxTenant) << 12);
}

uint32_t pack_cell(BlockState state, uint32_t refcount, uint32_t fill, uint32_t tenant) {
  const CellState s = state == BlockState::kFree         ? CellState::kFree
                      : state == BlockState::kCachedFree ? CellState::kCachedFree
                                                         : CellState::kInUse;
  return pack_cell(s, refcount > 1, fill, tenant);
}

void diff_cells(std::span<const uint32_t> before, std::span<const uint32_t> after,
                std::vector<uint32_t>* runs) {
  KVS_CHECK_MSG(before.size() == after.size(), "diff_cells of pools of different sizes");
  const size_t n = after.size();
  size_t i = 0;
  while (i < n) {
    if (before[i] == after[i]) {
      ++i;
      continue;
    }
    const uint32_t value = after[i];
    size_t j = i + 1;
    while (j < n && after[j] == value && before[j] != value) ++j;
    runs->push_back(static_cast<uint32_t>(i));
    runs->push_back(static_cast<uint32_t>(j - i));
    runs->push_back(value);
    i = j;
  }
}

Status apply_cell_runs(std::span<const uint32_t> runs, std::span<uint32_t> cells) {
  if (runs.size() % 3 != 0) return invalid_argument("cell runs are not whole triples");
  uint64_t end = 0;
  for (size_t k = 0; k < runs.size(); k += 3) {
    const uint64_t first = runs[k], count = runs[k + 1];
    if (count == 0) return invalid_argument("an empty cell run");
    if (first < end) return invalid_argument("cell runs out of order");
    if (first + count > cells.size()) return invalid_argument("a cell run past the pool");
    end = first + count;
  }
  for (size_t k = 0; k < runs.size(); k += 3)
    std::fill_n(cells.begin() + runs[k], runs[k + 1], runs[k + 2]);
  return Status::ok();
}

void block_ranges(std::span<const BlockId> table, std::vector<uint32_t>* out) {
  size_t i = 0;
  while (i < table.size() && !table[i].is_valid()) ++i;
  out->push_back(static_cast<uint32_t>(i));
  while (i < table.size()) {
    KVS_CHECK_MSG(table[i].is_valid(), "a released entry after a held block");
    size_t j = i + 1;
    while (j < table.size() && table[j].value == table[j - 1].value + 1) ++j;
    out->push_back(table[i].value);
    out->push_back(static_cast<uint32_t>(j - i));
    i = j;
  }
}

}  // namespace kvs
