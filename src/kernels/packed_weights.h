// Packed weights: packing a weight matrix's GGUF rows into the layout of kernels/packed_layout.h
// (once at model load, or one group at a time for a matrix that was not packed), and reading a
// row back out of it.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/packed_layout.h"
#include "kernels/weight_matrix.h"

namespace kvs {
// The types with a packed layout (the integer path's: Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K).
[[nodiscard]] bool packed_layout_supports(WeightType t);

// Bytes of one group (16 rows, all `cols` columns) and of a whole [rows][cols] weight.
[[nodiscard]] uint64_t packed_group_bytes(WeightType t, int64_t cols);
[[nodiscard]] uint64_t packed_weight_bytes(WeightType t, int64_t rows, int64_t cols);

// Packs group `g` (rows 16g .. 16g+15) of w's GGUF rows (w.data) into out
// (packed_group_bytes). Scalar; exact. Preconditions: packed_layout_supports(w.type).
void pack_group(const WeightMatrix& w, int64_t g, uint8_t* out);

// Packs groups [g0, g1) of w into their places in out (the whole weight's packed_weight_bytes,
// 64-byte aligned: group g at g x packed_group_bytes), split over the pool's threads.
void pack_groups(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out, ThreadPool& pool);
// pack_groups of every group of w.
void pack_weight(const WeightMatrix& w, uint8_t* out, ThreadPool& pool);

// The GGUF bytes of row `row` (weight_row_bytes(w.type, w.cols) of them), rebuilt from w.packed:
// the same bytes the file had (the layout keeps every bit). For embedding lookups once the file's
// pages are released.
void packed_row_to_gguf(const WeightMatrix& w, int64_t row, uint8_t* out);

}  // namespace kvs
