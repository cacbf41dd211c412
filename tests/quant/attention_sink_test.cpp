// AttentionSink (quant/attention_sink.h): a slot's rows, the start-token table (publish, adopt,
// least recently used eviction), and random operations against a simple model.
#include "quant/attention_sink.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
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
  EXPECT_FALSE(s.knows_start(7));
  EXPECT_FALSE(s.knows_start(-1));  // what marks an empty entry is no token
  EXPECT_FALSE(s.adopt(1, 7));
  EXPECT_FALSE(s.valid(1));
  fill(s, 0, 3);
  s.publish(0, 7);
  EXPECT_TRUE(s.knows_start(7));
  EXPECT_TRUE(s.adopt(1, 7));
  EXPECT_TRUE(holds(s, 1, 3));
  // The slot's rows are its own: overwriting slot 0 changes neither slot 1 nor the table.
  fill(s, 0, 4);
  EXPECT_TRUE(holds(s, 1, 3));
  s.reset_slot(1);
  EXPECT_FALSE(s.valid(1));
  EXPECT_TRUE(s.adopt(1, 7));
  EXPECT_TRUE(holds(s, 1, 3));
  s.copy_slot(0, 1);
  EXPECT_TRUE(holds(s, 1, 4));
  EXPECT_TRUE(s.check_integrity());
}

TEST(AttentionSinkTest, ForgetsTheLeastRecentlyUsedToken) {
  AttentionSink s = AttentionSink::create(2, kLayers, kHeads, kDim).value();
  fill(s, 0, 1);
  s.publish(0, 10);
  fill(s, 0, 2);
  s.publish(0, 20);
  ASSERT_TRUE(s.adopt(1, 10));  // 10 is now the most recently used
  fill(s, 0, 3);
  s.publish(0, 30);  // full: forgets 20
  EXPECT_TRUE(s.knows_start(10));
  EXPECT_FALSE(s.knows_start(20));
  EXPECT_TRUE(s.knows_start(30));
  EXPECT_EQ(s.tokens_by_use(), (std::vector<int32_t>{10, 30}));
  // Publishing a known token replaces its rows in place.
  fill(s, 0, 4);
  s.publish(0, 10);
  ASSERT_TRUE(s.adopt(1, 10));
  EXPECT_TRUE(holds(s, 1, 4));
  EXPECT_EQ(s.tokens_by_use(), (std::vector<int32_t>{30, 10}));
  EXPECT_TRUE(s.check_integrity());
}

TEST(AttentionSinkTest, RandomOperationsMatchASimpleModel) {
  constexpr uint32_t kSlots = 3;
  AttentionSink s = AttentionSink::create(kSlots, kLayers, kHeads, kDim).value();
  std::mt19937 rng(3);
  std::map<int32_t, uint32_t> table;  // token -> tag
  std::list<int32_t> lru;             // least recently used first
  std::vector<int64_t> slot_tag(kSlots, -1);
  uint32_t next_tag = 1;
  auto touch = [&](int32_t token) {
    lru.remove(token);
    lru.push_back(token);
  };
  for (int op = 0; op < 2000; ++op) {
    const auto slot = static_cast<uint32_t>(rng() % kSlots);
    const auto token = static_cast<int32_t>(rng() % 6);
    switch (rng() % 4) {
      case 0:  // the slot's sequence computes position 0
        fill(s, slot, next_tag);
        slot_tag[slot] = next_tag++;
        break;
      case 1:  // it publishes its rows
        if (slot_tag[slot] < 0) break;
        s.publish(slot, token);
        if (table.count(token) == 0 && table.size() == kSlots) {
          table.erase(lru.front());
          lru.pop_front();
        }
        table[token] = static_cast<uint32_t>(slot_tag[slot]);
        touch(token);
        break;
      case 2: {  // a sequence with a prefix hit adopts
        const bool known = table.count(token) != 0;
        ASSERT_EQ(s.adopt(slot, token), known) << op;
        if (known) {
          slot_tag[slot] = table[token];
          touch(token);
        }
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
    for (int32_t t = 0; t < 6; ++t) ASSERT_EQ(s.knows_start(t), table.count(t) != 0) << op;
    ASSERT_EQ(s.tokens_by_use(), std::vector<int32_t>(lru.begin(), lru.end())) << op;
    ASSERT_TRUE(s.check_integrity()) << op;
  }
}

}  // namespace
}  // namespace kvs
