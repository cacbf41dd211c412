// KV events in vLLM's format: how cache changes become events (chains merged, removals merged,
// chain starts carrying their root), and the msgpack bytes of a batch, decoded back field by
// field with msgpack-cxx.
#include "server/kv_event_batch.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>

namespace kvs {
namespace {

CacheEvent stored(uint64_t key, uint64_t parent, bool start, int32_t first_token) {
  return {.stored = true,
          .key = key,
          .parent_key = parent,
          .chain_start = start,
          .tokens = {first_token, first_token + 1}};
}

CacheEvent removed(uint64_t key) { return {.stored = false, .key = key}; }

TEST(KvEventBatchTest, ChainsAndRemovalsAreMerged) {
  const std::vector<CacheEvent> changes = {
      stored(11, 7, true, 1),
      stored(12, 11, false, 3),
      stored(13, 12, false, 5),
      stored(21, 12, false, 9),  // another child of 12, after 13: a new event
      removed(13),
      removed(21),
      stored(31, 8, true, 20)};
  const std::vector<KvEvent> e = kv_events_of(changes, kMediumPool);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(e[0].block_hashes, (std::vector<uint64_t>{11, 12, 13}));
  EXPECT_FALSE(e[0].parent.has_value());
  EXPECT_EQ(e[0].chain_root, 7u);
  EXPECT_EQ(e[0].token_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(e[1].block_hashes, (std::vector<uint64_t>{21}));
  EXPECT_EQ(e[1].parent, 12u);
  EXPECT_FALSE(e[1].chain_root.has_value());
  EXPECT_EQ(e[2].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(e[2].block_hashes, (std::vector<uint64_t>{13, 21}));
  EXPECT_EQ(e[3].chain_root, 8u);
  EXPECT_EQ(e[0].medium, "GPU");
}

std::map<std::string, msgpack::object> as_map(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::MAP);
  std::map<std::string, msgpack::object> m;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const std::string k = o.via.map.ptr[i].key.as<std::string>();
    m[k] = o.via.map.ptr[i].val;
  }
  return m;
}

std::vector<std::string> keys_in_order(const msgpack::object& o) {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < o.via.map.size; ++i)
    out.push_back(o.via.map.ptr[i].key.as<std::string>());
  return out;
}

TEST(KvEventBatchTest, EncodesVllmsBatchAndTaggedMaps) {
  const std::vector<CacheEvent> changes = {stored(0xfedcba9876543210ULL, 5, true, 1),
                                           stored(2, 0xfedcba9876543210ULL, false, 3), removed(2),
                                           stored(9, 2, false, 7)};
  std::vector<KvEvent> events = kv_events_of(changes, kMediumPool);
  events.push_back({.kind = KvEvent::Kind::kAllCleared});
  const std::string bytes = encode_kv_event_batch(1234.5, events, 2, 0);
  const msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& batch = h.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);  // [ts, events, data_parallel_rank]
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_DOUBLE_EQ(batch.via.array.ptr[0].as<double>(), 1234.5);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 0);
  const msgpack::object& ev = batch.via.array.ptr[1];
  ASSERT_EQ(ev.via.array.size, 4u);

  const msgpack::object& s0 = ev.via.array.ptr[0];
  EXPECT_EQ(keys_in_order(s0),
            (std::vector<std::string>{"type", "block_hashes", "parent_block_hash", "token_ids",
                                      "block_size", "lora_id", "medium", "lora_name", "extra_keys",
                                      "group_idx", "kv_cache_spec_kind"}));
  auto m = as_map(s0);
  EXPECT_EQ(m["type"].as<std::string>(), "BlockStored");
  EXPECT_EQ(m["block_hashes"].as<std::vector<uint64_t>>(),
            (std::vector<uint64_t>{0xfedcba9876543210ULL, 2}));
  EXPECT_EQ(m["parent_block_hash"].type, msgpack::type::NIL);
  EXPECT_EQ(m["token_ids"].as<std::vector<int>>(), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(m["block_size"].as<int>(), 2);
  EXPECT_EQ(m["lora_id"].type, msgpack::type::NIL);
  EXPECT_EQ(m["lora_name"].type, msgpack::type::NIL);
  EXPECT_EQ(m["medium"].as<std::string>(), "GPU");
  const msgpack::object& extra = m["extra_keys"];
  ASSERT_EQ(extra.via.array.size, 2u);
  EXPECT_EQ(extra.via.array.ptr[0].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{5}));
  EXPECT_EQ(extra.via.array.ptr[1].type, msgpack::type::NIL);
  EXPECT_EQ(m["group_idx"].as<int>(), 0);
  EXPECT_EQ(m["kv_cache_spec_kind"].as<std::string>(), "full_attention");

  auto r = as_map(ev.via.array.ptr[1]);
  EXPECT_EQ(keys_in_order(ev.via.array.ptr[1]),
            (std::vector<std::string>{"type", "block_hashes", "medium", "group_idx"}));
  EXPECT_EQ(r["type"].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(r["block_hashes"].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{2}));

  auto s2 = as_map(ev.via.array.ptr[2]);  // a continuation: parent set, no extra_keys
  EXPECT_EQ(s2["parent_block_hash"].as<uint64_t>(), 2u);
  EXPECT_EQ(s2.count("extra_keys"), 0u);

  auto c = as_map(ev.via.array.ptr[3]);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c["type"].as<std::string>(), "AllBlocksCleared");
}

}  // namespace
}  // namespace kvs
