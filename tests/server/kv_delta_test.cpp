// The dashboard's block-map delta encoding (kv_delta.h): cell packing, runs of changed cells that
// round-trip against a plain array model over long random runs, and block-table ranges.
#include "server/kv_delta.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvs {
namespace {

TEST(DashboardKvDelta, CellsPackEveryField) {
  const uint32_t c = pack_cell(CellState::kInUse, true, 13, 7);
  EXPECT_EQ(cell_state(c), CellState::kInUse);
  EXPECT_TRUE(cell_shared(c));
  EXPECT_EQ(cell_fill(c), 13u);
  EXPECT_EQ(cell_tenant(c), 7u);
  const uint32_t cached = pack_cell(BlockState::kCachedFree, 0, 16, 3);
  EXPECT_EQ(cell_state(cached), CellState::kCachedFree);
  EXPECT_FALSE(cell_shared(cached));
  EXPECT_EQ(cell_fill(cached), 16u);
  EXPECT_EQ(cell_tenant(cached), 3u);
  EXPECT_TRUE(cell_shared(pack_cell(BlockState::kInUse, 2, 1, 0)));
  EXPECT_FALSE(cell_shared(pack_cell(BlockState::kInUse, 1, 1, 0)));
  // A free block's stale tenant and fill are dropped: an untouched pool is all zeros.
  EXPECT_EQ(pack_cell(BlockState::kFree, 0, 16, 9), 0u);
  // The largest fill (kMaxBlockSize) fits; tenant slots beyond 20 bits saturate.
  EXPECT_EQ(cell_fill(pack_cell(CellState::kInUse, false, 256, 0)), 256u);
  EXPECT_EQ(cell_tenant(pack_cell(CellState::kInUse, false, 1, 1u << 24)), kCellMaxTenant);
  EXPECT_EQ(cell_state(pack_cell(CellState::kLoading, false, 0, 0)), CellState::kLoading);
}

TEST(DashboardKvDelta, RunsCoverExactlyTheChangedCellsAndMergeEqualNeighbours) {
  const std::vector<uint32_t> before = {0, 0, 0, 0, 0, 4, 4, 4};
  const std::vector<uint32_t> after = {0, 5, 5, 7, 0, 4, 5, 5};
  std::vector<uint32_t> runs;
  diff_cells(before, after, &runs);
  // Cells 1-2 became 5, cell 3 became 7, cells 6-7 became 5; cell 5 stayed 4 (not sent).
  EXPECT_EQ(runs, (std::vector<uint32_t>{1, 2, 5, 3, 1, 7, 6, 2, 5}));
  std::vector<uint32_t> cells = before;
  ASSERT_TRUE(apply_cell_runs(runs, cells).is_ok());
  EXPECT_EQ(cells, after);
  runs.clear();
  diff_cells(after, after, &runs);
  EXPECT_TRUE(runs.empty());
}

TEST(DashboardKvDelta, KeyFrameIsTheDiffAgainstAnEmptyPool) {
  const std::vector<uint32_t> zeros(6, 0);
  const std::vector<uint32_t> pool = {0, 0, 9, 9, 9, 0};
  std::vector<uint32_t> runs;
  diff_cells(zeros, pool, &runs);
  EXPECT_EQ(runs, (std::vector<uint32_t>{2, 3, 9}));
}

// Long random runs: the page's array, updated only by the runs, always equals the server's.
TEST(DashboardKvDelta, RandomUpdatesRoundTripAgainstAnArrayModel) {
  std::mt19937 rng(7);
  for (uint32_t n : {1u, 2u, 17u, 1000u}) {
    std::vector<uint32_t> server(n, 0), page(n, 0);
    for (int step = 0; step < 400; ++step) {
      std::vector<uint32_t> next = server;
      // A burst of changes: single cells and contiguous ranges (allocation from the free list).
      const int edits = static_cast<int>(rng() % 6);
      for (int e = 0; e < edits; ++e) {
        const uint32_t first = rng() % n;
        const uint32_t len = 1 + rng() % std::max<uint32_t>(1, n / 8);
        const uint32_t value =
            rng() % 3 == 0 ? 0 : pack_cell(CellState::kInUse, rng() % 2, rng() % 17, rng() % 4);
        for (uint32_t i = first; i < std::min(n, first + len); ++i)
          next[i] = rng() % 4 ? value : server[i];
      }
      std::vector<uint32_t> runs;
      diff_cells(server, next, &runs);
      ASSERT_EQ(runs.size() % 3, 0u);
      uint64_t sent = 0;
      for (size_t k = 0; k < runs.size(); k += 3) {
        sent += runs[k + 1];
        for (uint32_t i = runs[k]; i < runs[k] + runs[k + 1]; ++i) {
          ASSERT_NE(server[i], next[i]) << "a run covers an unchanged cell";
          ASSERT_EQ(next[i], runs[k + 2]);
        }
        if (k >= 3 && runs[k - 3] + runs[k - 2] == runs[k]) {
          ASSERT_NE(runs[k - 1], runs[k + 2]) << "adjacent runs with one value are not merged";
        }
      }
      uint64_t changed = 0;
      for (uint32_t i = 0; i < n; ++i) changed += server[i] != next[i];
      ASSERT_EQ(sent, changed);
      ASSERT_TRUE(apply_cell_runs(runs, page).is_ok());
      ASSERT_EQ(page, next) << "n=" << n << " step=" << step;
      server = next;
    }
  }
}

TEST(DashboardKvDelta, MalformedRunsAreRefusedAndChangeNothing) {
  std::vector<uint32_t> cells(4, 1);
  const std::vector<uint32_t> original = cells;
  EXPECT_FALSE(apply_cell_runs(std::vector<uint32_t>{0, 1}, cells).is_ok());     // not triples
  EXPECT_FALSE(apply_cell_runs(std::vector<uint32_t>{0, 0, 5}, cells).is_ok());  // empty
  EXPECT_FALSE(apply_cell_runs(std::vector<uint32_t>{3, 2, 5}, cells).is_ok());  // past end
  EXPECT_FALSE(apply_cell_runs(std::vector<uint32_t>{2, 1, 5, 0, 1, 5}, cells).is_ok());  // order
  EXPECT_FALSE(apply_cell_runs(std::vector<uint32_t>{0, 1, 7, 4294967295u, 2, 5}, cells).is_ok());
  EXPECT_EQ(cells, original);
}

TEST(DashboardKvDelta, BlockTablesBecomeRangesOfConsecutiveIds) {
  const std::vector<BlockId> table = {BlockId{4}, BlockId{5},  BlockId{6}, BlockId{2},
                                      BlockId{9}, BlockId{10}, BlockId{8}};
  std::vector<uint32_t> out;
  block_ranges(table, &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 4, 3, 2, 1, 9, 2, 8, 1}));
  out.clear();
  block_ranges({}, &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{0}));
}

TEST(DashboardKvDelta, ASlidingGroupsReleasedEntriesAreCountedFirst) {
  // A sliding layer group releases the blocks behind its window: its table leads with them.
  const std::vector<BlockId> table = {BlockId::invalid(), BlockId::invalid(), BlockId::invalid(),
                                      BlockId{7},         BlockId{8},         BlockId{3}};
  std::vector<uint32_t> out;
  block_ranges(table, &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{3, 7, 2, 3, 1}));
  out.clear();
  block_ranges(std::vector<BlockId>(4, BlockId::invalid()), &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{4}));
}

}  // namespace
}  // namespace kvs
