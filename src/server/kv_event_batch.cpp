#include "server/kv_event_batch.h"

#include <msgpack.hpp>

#include <cstring>

namespace kvs {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void str(Packer& p, const char* s) {
  const uint32_t n = static_cast<uint32_t>(std::strlen(s));
  p.pack_str(n);
  p.pack_str_body(s, n);
}

void hashes(Packer& p, const std::vector<uint64_t>& h) {
  p.pack_array(static_cast<uint32_t>(h.size()));
  for (uint64_t v : h) p.pack_uint64(v);
}

void pack_stored(Packer& p, const KvEvent& e, uint32_t block_size) {
  p.pack_map(e.chain_root ? 11 : 10);
  str(p, "type");
  str(p, "BlockStored");
  str(p, "block_hashes");
  hashes(p, e.block_hashes);
  str(p, "parent_block_hash");
  if (e.parent)
    p.pack_uint64(*e.parent);
  else
    p.pack_nil();
  str(p, "token_ids");
  p.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (int32_t t : e.token_ids) p.pack_int32(t);
  str(p, "block_size");
  p.pack_uint32(block_size);
  str(p, "lora_id");
  p.pack_nil();
  str(p, "medium");
  str(p, e.medium.c_str());
  str(p, "lora_name");
  p.pack_nil();
  if (e.chain_root) {
    // One entry per block: the first block's is (root key,), the others' nil.
    str(p, "extra_keys");
    p.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
    for (size_t i = 0; i < e.block_hashes.size(); ++i) {
      if (i == 0) {
        p.pack_array(1);
        p.pack_uint64(*e.chain_root);
      } else {
        p.pack_nil();
      }
    }
  }
  str(p, "group_idx");
  p.pack_uint32(0);
  str(p, "kv_cache_spec_kind");
  str(p, "full_attention");
}

}  // namespace

std::vector<KvEvent> kv_events_of(std::span<const CacheEvent> changes, const char* medium) {
  std::vector<KvEvent> out;
  for (const CacheEvent& c : changes) {
    KvEvent* last = out.empty() ? nullptr : &out.back();
    if (c.stored) {
      // Extends the previous BlockStored when this block's parent is its last block.
      if (last != nullptr && last->kind == KvEvent::Kind::kStored && !c.chain_start &&
          last->block_hashes.back() == c.parent_key) {
        last->block_hashes.push_back(c.key);
        last->token_ids.insert(last->token_ids.end(), c.tokens.begin(), c.tokens.end());
        continue;
      }
      KvEvent e{.kind = KvEvent::Kind::kStored, .medium = medium};
      e.block_hashes.push_back(c.key);
      if (c.chain_start)
        e.chain_root = c.parent_key;
      else
        e.parent = c.parent_key;
      e.token_ids = c.tokens;
      out.push_back(std::move(e));
    } else {
      if (last != nullptr && last->kind == KvEvent::Kind::kRemoved) {
        last->block_hashes.push_back(c.key);
        continue;
      }
      KvEvent e{.kind = KvEvent::Kind::kRemoved, .medium = medium};
      e.block_hashes.push_back(c.key);
      out.push_back(std::move(e));
    }
  }
  return out;
}

std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events, uint32_t block_size,
                                  int32_t data_parallel_rank) {
  msgpack::sbuffer buf;
  Packer p(&buf);
  p.pack_array(3);
  p.pack_double(ts);
  p.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvEvent& e : events) {
    switch (e.kind) {
      case KvEvent::Kind::kStored: pack_stored(p, e, block_size); break;
      case KvEvent::Kind::kRemoved:
        p.pack_map(4);
        str(p, "type");
        str(p, "BlockRemoved");
        str(p, "block_hashes");
        hashes(p, e.block_hashes);
        str(p, "medium");
        str(p, e.medium.c_str());
        str(p, "group_idx");
        p.pack_uint32(0);
        break;
      case KvEvent::Kind::kAllCleared:
        p.pack_map(1);
        str(p, "type");
        str(p, "AllBlocksCleared");
        break;
    }
  }
  p.pack_int32(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

}  // namespace kvs
