// AttentionSink (quant/attention_sink.h): a slot's rows, the table entries' rows (publish,
// adopt), and random operations against a simple model. Which token an entry holds is
// kvcache/start_token_table.h's (tests/kvcache/start_token_table_test.cpp).
#include "quant/attention_sink.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace kvs {
namespace {

constexpr uint32_t kLayers = 3, kHeads = 2, kDim = 4;

// Rows that name their tag, layer, head and element (V = K + 1).
uint16_t cell(uint32_t tag, uint32_t layer, uint32_t head, uint32_t i) {
  return static_cast<uint16_t>(tag * 29 + layer * 8 + head * 4 + i);  // distinct for tags < 2200
}

void fill(AttentionSink& s, uint32_t slot, uint32_t tag) {
  s.begin_rows(slot);
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t h = 0; h < kHeads; ++h) {
      uint16_t k[kDim], v[kDim];
      for (uint32_t i = 0; i < kDim; ++i) {
        k[i] = cell(tag, l, h, i);
        v[i] = static_cast<uint16_t>(cell(tag, l, h, i) + 1);
      }
      s.store(slot, l, h, k, v);
    }
}

// The slot holds the rows fill(.., tag) wrote.
bool holds(const AttentionSink& s, uint32_t slot, uint32_t tag) {
  if (!s.valid(slot)) return false;
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t h = 0; h < kHeads; ++h)
      for (uint32_t i = 0; i < kDim; ++i)
        if (s.key(slot, l, h)[i] != cell(tag, l, h, i) ||
            s.value(slot, l, h)[i] != cell(tag, l, h, i) + 1)
          return false;
  return true;
}

TEST(AttentionSinkTest, Bytes) {
  // Two rows per slot (the slot's and a table entry), K and V, f16.
  EXPECT_EQ(AttentionSink::bytes(64, 30, 3, 64), 2ull * 64 * 30 * 3 * 64 * 2 * 2);
}

TEST(AttentionSinkTest, PublishThenAdoptCopiesEveryLayer) {
  AttentionSink s = AttentionSink::create(2, kLayers, kHeads, kDim).value();
  EXPECT_FALSE(s.valid(0));
  EXPECT_FALSE(s.valid(1));
  fill(s, 0, 3);
  s.publish(0, 1);
  s.adopt(1, 1);
  EXPECT_TRUE(holds(s, 1, 3));
  // The slot's rows are its own: overwriting slot 0 changes neither slot 1 nor the entry.
  fill(s, 0, 4);
  EXPECT_TRUE(holds(s, 1, 3));
  s.reset_slot(1);
  EXPECT_FALSE(s.valid(1));
  s.adopt(1, 1);
  EXPECT_TRUE(holds(s, 1, 3));
  s.copy_slot(0, 1);
  EXPECT_TRUE(holds(s, 1, 4));
  // Publishing into a written entry replaces its rows.
  s.publish(0, 1);
  s.reset_slot(1);
  s.adopt(1, 1);
  EXPECT_TRUE(holds(s, 1, 4));
}

TEST(AttentionSinkTest, RandomOperationsMatchASimpleModel) {
  constexpr uint32_t kSlots = 3;
  AttentionSink s = AttentionSink::create(kSlots, kLayers, kHeads, kDim).value();
  std::mt19937 rng(3);
  std::vector<int64_t> slot_tag(kSlots, -1), entry_tag(kSlots, -1);
  uint32_t next_tag = 1;
  for (int op = 0; op < 2000; ++op) {
    const auto slot = static_cast<uint32_t>(rng() % kSlots);
    const auto entry = static_cast<uint32_t>(rng() % kSlots);
    switch (rng() % 5) {
      case 0:  // the slot's sequence computes position 0
        fill(s, slot, next_tag);
        slot_tag[slot] = next_tag++;
        break;
      case 1:  // it publishes its rows
        if (slot_tag[slot] < 0) break;
        s.publish(slot, entry);
        entry_tag[entry] = slot_tag[slot];
        break;
      case 2:  // a sequence with a prefix hit adopts a written entry
        if (entry_tag[entry] < 0) break;
        s.adopt(slot, entry);
        slot_tag[slot] = entry_tag[entry];
        break;
      case 3: {  // a fork copies its parent's slot
        const auto dst = static_cast<uint32_t>(rng() % kSlots);
        s.copy_slot(slot, dst);
        slot_tag[dst] = slot_tag[slot];
        break;
      }
      default:  // the slot changes hands
        s.reset_slot(slot);
        slot_tag[slot] = -1;
    }
    for (uint32_t i = 0; i < kSlots; ++i) {
      ASSERT_EQ(s.valid(i), slot_tag[i] >= 0) << op;
      if (slot_tag[i] >= 0) {
        ASSERT_TRUE(holds(s, i, static_cast<uint32_t>(slot_tag[i]))) << op;
      }
    }
  }
}

}  // namespace
}  // namespace kvs
