// libFuzzer target for the disk tier's extent format (tiers/kv_extent.h): any byte string read
// from a KV offload directory must parse or fail with a Status, never crash, read outside the
// buffer or allocate without bound; a parsed header's sizes must be the ones it declares.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tiers/kv_extent.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  volatile bool ok = kvs::extent_mac_ok(kvs::SecretKey{}, bytes);
  const auto hb = kvs::extent_header_bytes(bytes);
  if (!hb.is_ok()) {
    if (hb.status().message().empty()) __builtin_trap();
    return 0;
  }
  const auto h = kvs::decode_extent_header(bytes);
  if (!h.is_ok()) {
    if (h.status().message().empty()) __builtin_trap();
    return 0;
  }
  if (h->header_bytes != *hb || h->header_bytes > size) __builtin_trap();
  if (h->tokens.size() != h->blocks.size() * h->ns.block_size) __builtin_trap();
  // Re-encoding a parsed header gives back the same bytes.
  const std::vector<uint8_t> again = kvs::encode_extent_header(*h);
  if (again.size() != h->header_bytes) __builtin_trap();
  for (size_t i = 16; i < again.size(); ++i)
    if (again[i] != data[i] && !(i >= 26 && i < 28) && !(i >= 44 && i < 48)) __builtin_trap();
  volatile uint64_t sink = h->file_bytes() + ok;
  for (size_t i = 0; i < h->blocks.size(); ++i)
    sink = sink + h->blocks[i].key + static_cast<uint64_t>(h->block_tokens(i).back());
  (void)sink;
  return 0;
}
