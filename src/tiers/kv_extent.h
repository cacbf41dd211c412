// KvExtent: the self-describing, authenticated format of what the tiers keep outside the process
// (a disk tier file, a Redis value). One extent holds up to a few consecutive blocks of prefix
// chains (the unit of disk I/O: one 16-token block is a few hundred KiB at most, small for a disk
// request; docs/offload.md measures the extent size).
//
//   offset 0   magic "KVSEXT\0\1" (8 bytes), version (u32), header_bytes (u32)
//   16         model fingerprint (u64), K format (u8), V format (u8), 2 reserved bytes,
//              block size (u32), block bytes (u64), number of blocks n (u32), 4 reserved bytes
//   48         secret id (u64): the public name of the server secret the MAC is keyed with
//   56         per block: chain key, parent key, salt check (3 x u64)
//              token ids: n x block_size x i32
//              payload bytes (u64) = n x block bytes
//   header_bytes   the blocks' KV bytes, in order (each laid out like a pool block)
//   end - 32   MAC: keyed BLAKE2b-256 (TierSecrets::mac) of everything before it
//
// All integers little-endian (the only byte order kvserve runs on). A reader checks the magic,
// version and sizes before trusting any length, and the MAC before using any byte: a value
// written by anyone who does not hold the server secret (a forged Redis value, a planted file)
// fails it, as does any accidental corruption.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/tier_key.h"
#include "quant/kv_format.h"

namespace kvs {

inline constexpr uint32_t kExtentVersion = 2;
inline constexpr uint64_t kExtentMacBytes = 32;
inline constexpr uint32_t kMaxExtentBlocks = 256;

// What must match for an extent to be usable by this engine.
struct ExtentNamespace {
  uint64_t model_fingerprint = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  uint32_t block_size = 16;
  uint64_t block_bytes = 0;
  uint64_t secret_id = 0;  // TierSecrets::id: extents of another secret are foreign
  friend bool operator==(const ExtentNamespace&, const ExtentNamespace&) = default;
};

struct ExtentHeader {
  ExtentNamespace ns;
  std::vector<TierBlockMeta> blocks;  // key, parent_key, salt_check (hits are not stored)
  std::vector<int32_t> tokens;        // [blocks][block_size]
  uint32_t header_bytes = 0;
  [[nodiscard]] uint64_t payload_bytes() const { return ns.block_bytes * blocks.size(); }
  [[nodiscard]] uint64_t file_bytes() const {
    return header_bytes + payload_bytes() + kExtentMacBytes;
  }
  [[nodiscard]] std::span<const int32_t> block_tokens(size_t i) const {
    return {tokens.data() + i * ns.block_size, ns.block_size};
  }
};

// Size of the header of an extent of n blocks of block_size tokens.
[[nodiscard]] uint32_t extent_header_size(uint32_t num_blocks, uint32_t block_size);
// The header's bytes (everything before the payload).
[[nodiscard]] std::vector<uint8_t> encode_extent_header(const ExtentHeader& header);
// Bytes needed to learn header_bytes (the fixed prefix).
inline constexpr size_t kExtentPrefixBytes = 16;
// header_bytes from the fixed prefix, after checking magic and version.
[[nodiscard]] Result<uint32_t> extent_header_bytes(std::span<const uint8_t> prefix);
// Parses a whole header (`bytes` holds at least header_bytes bytes); checks every length.
[[nodiscard]] Result<ExtentHeader> decode_extent_header(std::span<const uint8_t> bytes);
// The MAC of an extent's header and payload, as stored at its end.
void extent_mac(const SecretKey& key, std::span<const uint8_t> header,
                std::span<const uint8_t> payload, uint8_t out[kExtentMacBytes]);
// Whether a whole extent's trailing MAC (under `key`) matches the rest, in constant time.
[[nodiscard]] bool extent_mac_ok(const SecretKey& key, std::span<const uint8_t> file);

// A whole extent in memory (header, payload, MAC): the value the remote tier stores.
// payload.size() must be header.payload_bytes().
[[nodiscard]] std::vector<uint8_t> encode_extent(const SecretKey& key, const ExtentHeader& header,
                                                 std::span<const uint8_t> payload);
// Checks a whole extent (MAC, then header and its lengths against the size) and returns its
// header; the payload is bytes[header_bytes, header_bytes + payload_bytes()).
[[nodiscard]] Result<ExtentHeader> decode_extent(const SecretKey& key,
                                                 std::span<const uint8_t> bytes);

}  // namespace kvs
