// ServerSecret: the one secret a kvserve process holds, and the keys derived from it (libsodium,
// Debian's libsodium-dev; no hand-written crypto).
//
// It makes every identifier that crosses a trust boundary impossible to compute offline:
//   - the tenant of a bare --api-key (a keyed hash of the key),
//   - the root of a tenant's tier chains (tier_key.h), so nobody can precompute a tier key;
//   - the MAC of every value that leaves the process (a disk extent, a Redis value), so a value
//     written by anyone without the secret is rejected.
// Replicas that should share KV through Redis (or restart onto the same disk directory) hold the
// same secret (--kv-tier-secret-file); any two processes with different secrets share nothing.
//
// Sources, in order: a file the operator made (read_file: a regular file of at least 32 bytes,
// owned by this user and readable by nobody else, as ssh demands of a private key), a file this
// process creates once in a directory it owns (load_or_create_in), or random bytes for this
// process alone (random()).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include <sodium/crypto_generichash.h>

#include "core/status.h"

namespace kvs {

// A 256-bit key for one purpose.
using SecretKey = std::array<uint8_t, 32>;

class ServerSecret {
 public:
  static constexpr size_t kMinFileBytes = 32;
  static constexpr size_t kMaxFileBytes = 4096;

  [[nodiscard]] static ServerSecret random();
  // The secret of a file: its bytes (32..4096, whitespace at the end ignored) hashed to 256
  // bits. Refuses a link, a non-regular file, a file of another owner or one that the group
  // or others may read or write, naming the fix.
  static Result<ServerSecret> read_file(const std::string& path);
  // The secret kept in `name` inside the directory open as `dirfd` (the caller checked that
  // the directory is its own): read when present (with read_file's checks), else created with
  // fresh random bytes (mode 0600, O_EXCL, never through a link).
  static Result<ServerSecret> load_or_create_in(int dirfd, const std::string& dir_path,
                                                const std::string& name);

  // The key for one purpose, named by an 8-character context (libsodium's crypto_kdf).
  [[nodiscard]] SecretKey derive(std::string_view context8, uint64_t subkey_id = 1) const;
  // A public name of the secret: equal for equal secrets, reveals nothing about it.
  [[nodiscard]] uint64_t id() const;
  // Where it came from, for logs ("--kv-tier-secret-file F", "random (this process only)").
  [[nodiscard]] const std::string& source() const { return source_; }

 private:
  SecretKey master_{};
  std::string source_;
};

// A keyed 64-bit hash (BLAKE2b under `key`) of the concatenated parts: unpredictable without
// the key, and collisions cannot be crafted without it.
[[nodiscard]] uint64_t keyed_hash64(const SecretKey& key,
                                    std::initializer_list<std::span<const uint8_t>> parts);
[[nodiscard]] inline std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A MAC over several byte ranges (keyed BLAKE2b-256), computed incrementally.
class Mac {
 public:
  static constexpr size_t kBytes = 32;
  explicit Mac(const SecretKey& key);
  Mac& update(std::span<const uint8_t> bytes);
  void final(uint8_t out[kBytes]);

 private:
  crypto_generichash_state state_;
};

// Cryptographically random bytes (unpredictable names of temporary files, nonces).
void fill_random(std::span<uint8_t> out);
// 2 x bytes lowercase hex digits of fresh random bytes.
[[nodiscard]] std::string random_hex(size_t bytes);

// Whether two MACs are equal, in constant time.
[[nodiscard]] bool mac_equal(const uint8_t a[Mac::kBytes], const uint8_t b[Mac::kBytes]);

}  // namespace kvs
