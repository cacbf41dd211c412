// kv_delta: how the dashboard's block map travels. Every block of the pool is one 32-bit *cell*
// (what the page draws), and an update carries only the cells that changed since the previous
// update, run-length encoded.
//
// Cell layout (little end first):
//   bits 0-1   state: 0 free, 1 cached-free, 2 in use, 3 loading (a lower-tier load in flight;
//              none exist yet: transfers complete inside a step, so between steps no block is
//              ever seen loading)
//   bit  2     shared: refcount > 1 (prefix sharing, forks)
//   bits 3-11  fill: token slots holding KV, 0..256 (kMaxBlockSize)
//   bits 12-31 tenant slot (TenantStats::id, the hue); kCellMaxTenant for larger slots
// A free cell is always 0 (its stale tenant and fill are dropped), so a pool nobody has touched
// is all zeros and a key frame is simply the runs against all zeros.
//
// Runs: a flat array of triples (first, count, value): cells [first, first + count) all became
// `value`. Runs are in increasing order, do not overlap, and cover only changed cells; adjacent
// changed cells with the same new value share one run. Applying the runs of diff(a, b) to a
// gives b.
//
// Block ranges: a block table (in order) as [released, first, count, first, count, ...]: the
// number of leading entries a sliding layer group has released (0 for a full group), then the
// held blocks as pairs (first, count) of consecutive ascending block ids; tables allocated from
// the free list are mostly a few long ranges.
//
// Group plane: a second array of one value per block, the layer group the block holds (0 when
// free), diffed and sent as runs the same way (a uniform model's plane is all zeros).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/block_pool.h"

namespace kvs {

enum class CellState : uint8_t { kFree = 0, kCachedFree = 1, kInUse = 2, kLoading = 3 };

inline constexpr uint32_t kCellMaxFill = 511;         // 9 bits (kMaxBlockSize is 256)
inline constexpr uint32_t kCellMaxTenant = 0xFFFFFu;  // 20 bits

[[nodiscard]] uint32_t pack_cell(CellState state, bool shared, uint32_t fill, uint32_t tenant);
[[nodiscard]] uint32_t pack_cell(BlockState state, uint32_t refcount, uint32_t fill,
                                 uint32_t tenant);
[[nodiscard]] constexpr CellState cell_state(uint32_t cell) {
  return static_cast<CellState>(cell & 3u);
}
[[nodiscard]] constexpr bool cell_shared(uint32_t cell) { return (cell >> 2) & 1u; }
[[nodiscard]] constexpr uint32_t cell_fill(uint32_t cell) { return (cell >> 3) & kCellMaxFill; }
[[nodiscard]] constexpr uint32_t cell_tenant(uint32_t cell) { return cell >> 12; }

// Appends the runs that turn `before` into `after` (same length, precondition) to *runs.
// O(cells); nothing is appended when they are equal.
void diff_cells(std::span<const uint32_t> before, std::span<const uint32_t> after,
                std::vector<uint32_t>* runs);

// Applies runs to cells. invalid_argument (cells unchanged) when the array is not whole triples,
// a run is empty, out of range, or not after the previous one.
[[nodiscard]] Status apply_cell_runs(std::span<const uint32_t> runs, std::span<uint32_t> cells);

// Appends a block table as [released, (first, count) pairs of consecutive ascending ids].
// Precondition: invalid (released) entries only lead the table.
void block_ranges(std::span<const BlockId> table, std::vector<uint32_t>* out);

}  // namespace kvs
