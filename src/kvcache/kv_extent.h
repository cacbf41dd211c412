// KvExtent: the self-describing, checksummed file format of the disk tier. One extent holds up to
// a few consecutive blocks of prefix chains (the unit of disk I/O: one 16-token block is a few
// hundred KiB at most, small for a disk request; docs/offload.md measures the extent size).
//
//   offset 0   magic "KVSEXT\0\1" (8 bytes), version (u32), header_bytes (u32)
//   16         model fingerprint (u64), K format (u8), V format (u8), 2 reserved bytes,
//              block size (u32), block bytes (u64), number of blocks n (u32), 4 reserved bytes
//   48         per block: chain key, parent key, salt check (3 x u64)
//              token ids: n x block_size x i32
//              payload bytes (u64) = n x block bytes
//   header_bytes   the blocks' KV bytes, in order (each laid out like a pool block)
//   end - 16   XXH3-128 of everything before it (header and payload)
//
// All integers little-endian (the only byte order kvserve runs on). A reader checks the magic,
// version and sizes before trusting any length, and the checksum before using any byte.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kvcache/tier_key.h"
#include "quant/kv_format.h"

namespace kvs {

inline constexpr uint32_t kExtentVersion = 1;
inline constexpr uint64_t kExtentChecksumBytes = 16;
inline constexpr uint32_t kMaxExtentBlocks = 256;

// What must match for an extent to be usable by this engine.
struct ExtentNamespace {
  uint64_t model_fingerprint = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  uint32_t block_size = 16;
  uint64_t block_bytes = 0;
  friend bool operator==(const ExtentNamespace&, const ExtentNamespace&) = default;
};

struct ExtentHeader {
  ExtentNamespace ns;
  std::vector<TierBlockMeta> blocks;  // key, parent_key, salt_check (hits are not stored)
  std::vector<int32_t> tokens;        // [blocks][block_size]
  uint32_t header_bytes = 0;
  [[nodiscard]] uint64_t payload_bytes() const { return ns.block_bytes * blocks.size(); }
  [[nodiscard]] uint64_t file_bytes() const {
    return header_bytes + payload_bytes() + kExtentChecksumBytes;
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
// XXH3-128 of `bytes`, as stored at the end of an extent.
void extent_checksum(std::span<const uint8_t> bytes, uint8_t out[kExtentChecksumBytes]);
// Whether a whole extent file's trailing checksum matches the rest.
[[nodiscard]] bool extent_checksum_ok(std::span<const uint8_t> file);

// A whole extent in memory (header, payload, checksum): the value the remote tier stores.
// payload.size() must be header.payload_bytes().
[[nodiscard]] std::vector<uint8_t> encode_extent(const ExtentHeader& header,
                                                 std::span<const uint8_t> payload);
// Checks a whole extent (checksum, then header and its lengths against the size) and returns its
// header; the payload is bytes[header_bytes, header_bytes + payload_bytes()).
[[nodiscard]] Result<ExtentHeader> decode_extent(std::span<const uint8_t> bytes);

}  // namespace kvs
