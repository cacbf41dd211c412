// RecentWindow (quant/recent_window.h): the floor and window rule, where a row is read from (this
// step's rows or the ring), a chunk longer than the ring, and a fork's slot copy.
#include "quant/recent_window.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"

namespace kvs {
namespace {

constexpr uint32_t kHeads = 2, kDim = 4, kLayers = 3;

// Row values that name their position, head and element, V negated (exact in f16).
float value_of(int32_t pos, uint32_t head, uint32_t i, bool v) {
  const float x = float(pos) + 0.25f * float(head) + 0.0625f * float(i);
  return v ? -x : x;
}

// One step of one sequence: positions [first, first + n) in `slot`, rows of value_of.
void step(RecentWindow& w, int32_t first, int32_t n, int32_t slot, int32_t floor) {
  std::vector<int32_t> pos(n), slots(n, slot), floors(n, floor);
  std::vector<float> k(size_t(n) * kHeads * kDim), v(k.size());
  for (int32_t t = 0; t < n; ++t) {
    pos[t] = first + t;
    for (uint32_t h = 0; h < kHeads; ++h)
      for (uint32_t i = 0; i < kDim; ++i) {
        k[(size_t(t) * kHeads + h) * kDim + i] = value_of(first + t, h, i, false);
        v[(size_t(t) * kHeads + h) * kDim + i] = value_of(first + t, h, i, true);
      }
  }
  w.begin_step(n, pos.data(), slots.data(), floors.data());
  w.store(k.data(), v.data());
}

// The rows of `pos` hold value_of: exactly in f16, within half an int8 step (the row's largest
// element / 254) in int8.
void expect_row(const RecentWindow& w, int64_t t, uint32_t layer, int32_t pos) {
  for (uint32_t h = 0; h < kHeads; ++h) {
    float k[kDim], v[kDim];
    window_row_to_f32(w.key(t, layer, h, pos), kDim, k);
    window_row_to_f32(w.value(t, layer, h, pos), kDim, v);
    const float tol = w.row_dtype() == KvDtype::kInt8
                          ? std::abs(value_of(pos, h, kDim - 1, false)) / 254 * 1.001f
                          : 0.0f;
    for (uint32_t i = 0; i < kDim; ++i) {
      ASSERT_NEAR(k[i], value_of(pos, h, i, false), tol) << "t " << t << " pos " << pos;
      ASSERT_NEAR(v[i], value_of(pos, h, i, true), tol);
    }
  }
}

TEST(RecentWindowTest, FloorAndBytes) {
  EXPECT_EQ(RecentWindow::floor_of(511, 128), 368u);  // (511 - 128) rounded down to 16
  EXPECT_EQ(RecentWindow::floor_of(256, 128), 128u);
  EXPECT_EQ(RecentWindow::floor_of(100, 128), 0u);
  EXPECT_EQ(RecentWindow::floor_of(100, 0), 96u);
  // slots x layers x kv heads x (W + 16) x dim x 2 B x 2.
  EXPECT_EQ(RecentWindow::bytes(64, 128, 30, 3, 64), 64ull * 30 * 3 * 144 * 64 * 4);
  // int8 rows: dim + 2 B (the f16 scale); the sink's rows stay f16.
  EXPECT_EQ(RecentWindow::bytes(64, 256, 30, 3, 64, false, KvDtype::kInt8),
            64ull * 30 * 3 * 272 * 66 * 2);
  EXPECT_EQ(RecentWindow::bytes(64, 256, 30, 3, 64, true, KvDtype::kInt8) -
                RecentWindow::bytes(64, 256, 30, 3, 64, false, KvDtype::kInt8),
            RecentWindow::bytes(64, 0, 30, 3, 64, true) - RecentWindow::bytes(64, 0, 30, 3, 64));
  EXPECT_TRUE(check_recent_window_dtype(KvDtype::kF16).is_ok());
  EXPECT_TRUE(check_recent_window_dtype(KvDtype::kInt8).is_ok());
  EXPECT_NE(check_recent_window_dtype(KvDtype::kInt4).message().find("--kv-recent-window-dtype"),
            std::string::npos);
}

TEST(RecentWindowTest, WindowStartsAtGroupMinusWindowAboveTheFloor) {
  RecentWindow w = RecentWindow::create(1, 32, kLayers, kHeads, kDim).value();
  step(w, 0, 1, 0, 48);
  EXPECT_EQ(w.first_position(0, 48), 48);   // q = 47 < floor: none
  EXPECT_EQ(w.first_position(0, 49), 48);   // q = 48: group 48 - 32 = 16, floor 48
  EXPECT_EQ(w.first_position(0, 100), 64);  // q = 99: group 96 - 32
  EXPECT_EQ(w.first_position(0, 96), 48);   // q = 95: group 80 - 32 = 48
  step(w, 0, 1, -1, 0);
  EXPECT_EQ(w.first_position(0, 100), 100);  // no slot
}

class RecentWindowRowsTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(RecentWindowRowsTest, ChunksReadTheirOwnRowsAndTheRingBeforeThem) {
  RecentWindow w = RecentWindow::create(2, 32, kLayers, kHeads, kDim, false, GetParam()).value();
  // Prefill 0..99 in chunks of 7, 50 and 43 (the last longer than the ring of 48), each
  // committed to layer 1 after its rows were read.
  int32_t at = 0;
  for (int32_t n : {7, 50, 43}) {
    step(w, at, n, 1, 0);
    for (int32_t t = 0; t < n; ++t) {
      const int32_t q = at + t;
      for (int32_t p = w.first_position(t, q + 1); p <= q; ++p) expect_row(w, t, 1, p);
    }
    w.commit(1);
    at += n;
  }
  // A decode step at 100 reads 64..99 from the ring, 100 from the step.
  step(w, 100, 1, 1, 0);
  EXPECT_EQ(w.first_position(0, 101), 64);
  for (int32_t p = 64; p <= 100; ++p) expect_row(w, 0, 1, p);
  w.commit(1);
  // A fork: slot 0 goes on from slot 1's rows.
  w.copy_slot(1, 0);
  step(w, 101, 1, 0, 0);
  for (int32_t p = w.first_position(0, 102); p <= 101; ++p) expect_row(w, 0, 1, p);
}

// A slot taken by another sequence (a chunk that does not continue the slot's last step)
// holds none of the new owner's rows before it: reading one is a bug, caught, never the earlier
// owner's KV.
INSTANTIATE_TEST_SUITE_P(Rows, RecentWindowRowsTest,
                         ::testing::Values(KvDtype::kF16, KvDtype::kInt8),
                         [](const ::testing::TestParamInfo<KvDtype>& info) {
                           return std::string(kv_dtype_name(info.param));
                         });

TEST(RecentWindowDeathTest, ANewOwnerNeverReadsTheLastOwnersRows) {
  RecentWindow w = RecentWindow::create(1, 32, kLayers, kHeads, kDim).value();
  step(w, 0, 60, 0, 0);
  w.commit(0);
  step(w, 60, 1, 0, 0);  // the same sequence goes on: its ring rows are read
  expect_row(w, 0, 0, 40);
  step(w, 40, 1, 0, 0);  // another sequence at position 40 in the same slot
  EXPECT_EQ(w.first_position(0, 41), 0);
  EXPECT_DEATH((void)w.key(0, 0, 0, 39), "");
  expect_row(w, 0, 0, 40);  // its own row, from the step
  // Handed over between steps: even a chunk that happens to continue the last owner's
  // positions starts afresh.
  w.commit(0);
  w.reset_slot(0);
  step(w, 41, 1, 0, 0);
  EXPECT_DEATH((void)w.key(0, 0, 0, 40), "");
}

}  // namespace
}  // namespace kvs
