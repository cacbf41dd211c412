#include "tiers/kv_extent.h"

#include "core/check.h"

#include <cstring>
#include <string>

namespace kvs {

namespace {

constexpr uint8_t kMagic[8] = {'K', 'V', 'S', 'E', 'X', 'T', 0, 1};
constexpr size_t kFixedBytes = 56;
constexpr size_t kPerBlockBytes = 24;
// A header larger than this is not one we wrote (kMaxExtentBlocks blocks of 4096 tokens).
constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;

// Appends by writing at a cursor into a pre-sized buffer.
struct Writer {
  std::vector<uint8_t>& out;
  size_t at = 0;
  template <typename T>
  void put(T v) {
    std::memcpy(out.data() + at, &v, sizeof(T));
    at += sizeof(T);
  }
};

template <typename T>
T get(std::span<const uint8_t> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

}  // namespace

uint32_t extent_header_size(uint32_t num_blocks, uint32_t block_size) {
  return static_cast<uint32_t>(kFixedBytes + size_t{num_blocks} * kPerBlockBytes +
                               size_t{num_blocks} * block_size * 4 + 8);
}

std::vector<uint8_t> encode_extent_header(const ExtentHeader& h) {
  const size_t n = h.blocks.size();
  const size_t bytes = kFixedBytes + n * kPerBlockBytes + h.tokens.size() * 4 + 8;
  std::vector<uint8_t> out(bytes);
  std::memcpy(out.data(), kMagic, 8);
  Writer w{out, 8};
  w.put<uint32_t>(kExtentVersion);
  w.put<uint32_t>(static_cast<uint32_t>(bytes));
  w.put<uint64_t>(h.ns.model_fingerprint);
  w.put<uint8_t>(static_cast<uint8_t>(h.ns.k_dtype));
  w.put<uint8_t>(static_cast<uint8_t>(h.ns.v_dtype));
  w.put<uint16_t>(0);
  w.put<uint32_t>(h.ns.block_size);
  w.put<uint64_t>(h.ns.block_bytes);
  w.put<uint32_t>(static_cast<uint32_t>(n));
  w.put<uint32_t>(0);
  w.put<uint64_t>(h.ns.secret_id);
  for (const TierBlockMeta& m : h.blocks) {
    w.put<uint64_t>(m.key);
    w.put<uint64_t>(m.parent_key);
    w.put<uint64_t>(m.salt_check);
  }
  if (!h.tokens.empty()) std::memcpy(out.data() + w.at, h.tokens.data(), h.tokens.size() * 4);
  w.at += h.tokens.size() * 4;
  w.put<uint64_t>(h.ns.block_bytes * n);
  return out;
}

Result<uint32_t> extent_header_bytes(std::span<const uint8_t> prefix) {
  if (prefix.size() < kExtentPrefixBytes) return invalid_argument("extent: truncated prefix");
  if (std::memcmp(prefix.data(), kMagic, 8) != 0) return invalid_argument("extent: bad magic");
  if (get<uint32_t>(prefix, 8) != kExtentVersion)
    return invalid_argument("extent: unsupported version " +
                            std::to_string(get<uint32_t>(prefix, 8)));
  const uint32_t hb = get<uint32_t>(prefix, 12);
  if (hb < kFixedBytes + 8 || hb > kMaxHeaderBytes)
    return invalid_argument("extent: implausible header size");
  return hb;
}

Result<ExtentHeader> decode_extent_header(std::span<const uint8_t> bytes) {
  KVS_ASSIGN_OR_RETURN(const uint32_t hb, extent_header_bytes(bytes));
  if (bytes.size() < hb) return invalid_argument("extent: truncated header");
  ExtentHeader h;
  h.header_bytes = hb;
  h.ns.model_fingerprint = get<uint64_t>(bytes, 16);
  const uint8_t k = get<uint8_t>(bytes, 24), v = get<uint8_t>(bytes, 25);
  const std::optional<KvDtype> kd = kv_dtype_from_code(k), vd = kv_dtype_from_code(v);
  if (!kd || !vd) return invalid_argument("extent: unknown KV format");
  h.ns.k_dtype = *kd;
  h.ns.v_dtype = *vd;
  h.ns.block_size = get<uint32_t>(bytes, 28);
  h.ns.block_bytes = get<uint64_t>(bytes, 32);
  const uint32_t n = get<uint32_t>(bytes, 40);
  h.ns.secret_id = get<uint64_t>(bytes, 48);
  if (n == 0 || n > kMaxExtentBlocks || h.ns.block_size == 0 || h.ns.block_size > 4096 ||
      h.ns.block_bytes == 0 || h.ns.block_bytes > (uint64_t{1} << 32))
    return invalid_argument("extent: implausible block geometry");
  const uint64_t expect =
      kFixedBytes + uint64_t{n} * kPerBlockBytes + uint64_t{n} * h.ns.block_size * 4 + 8;
  if (expect != hb) return invalid_argument("extent: header size does not match its contents");
  size_t at = kFixedBytes;
  h.blocks.resize(n);
  for (TierBlockMeta& m : h.blocks) {
    m.key = get<uint64_t>(bytes, at);
    m.parent_key = get<uint64_t>(bytes, at + 8);
    m.salt_check = get<uint64_t>(bytes, at + 16);
    at += kPerBlockBytes;
  }
  h.tokens.resize(size_t{n} * h.ns.block_size);
  std::memcpy(h.tokens.data(), bytes.data() + at, h.tokens.size() * 4);
  at += h.tokens.size() * 4;
  if (get<uint64_t>(bytes, at) != h.payload_bytes())
    return invalid_argument("extent: payload size does not match its blocks");
  return h;
}

void extent_mac(const SecretKey& key, std::span<const uint8_t> header,
                std::span<const uint8_t> payload, uint8_t out[kExtentMacBytes]) {
  static_assert(kExtentMacBytes == Mac::kBytes);
  Mac(key).update(header).update(payload).final(out);
}

bool extent_mac_ok(const SecretKey& key, std::span<const uint8_t> file) {
  if (file.size() < kExtentMacBytes) return false;
  uint8_t m[kExtentMacBytes];
  extent_mac(key, file.first(file.size() - kExtentMacBytes), {}, m);
  return mac_equal(m, file.data() + file.size() - kExtentMacBytes);
}

std::vector<uint8_t> encode_extent(const SecretKey& key, const ExtentHeader& header,
                                   std::span<const uint8_t> payload) {
  KVS_CHECK(payload.size() == header.payload_bytes());
  std::vector<uint8_t> out = encode_extent_header(header);
  const size_t hb = out.size();
  out.resize(hb + payload.size() + kExtentMacBytes);
  if (!payload.empty()) std::memcpy(out.data() + hb, payload.data(), payload.size());
  extent_mac(key, std::span<const uint8_t>(out).first(hb + payload.size()), {},
             out.data() + hb + payload.size());
  return out;
}

Result<ExtentHeader> decode_extent(const SecretKey& key, std::span<const uint8_t> bytes) {
  if (!extent_mac_ok(key, bytes))
    return data_loss("extent: MAC mismatch (corrupt, or not written under this server secret)");
  KVS_ASSIGN_OR_RETURN(ExtentHeader h, decode_extent_header(bytes));
  if (h.file_bytes() != bytes.size()) return data_loss("extent: size does not match its header");
  return h;
}

}  // namespace kvs
