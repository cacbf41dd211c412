#include "core/server_secret.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace kvs {

namespace {

void ensure_sodium() {
  static const bool ready = sodium_init() >= 0;
  KVS_CHECK_MSG(ready, "libsodium failed to initialize");
}

constexpr std::string_view kMasterTag = "kvserve server secret v1";

SecretKey master_of(std::span<const uint8_t> material) {
  SecretKey out{};
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, out.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kMasterTag.data()),
                            kMasterTag.size());
  crypto_generichash_update(&st, material.data(), material.size());
  crypto_generichash_final(&st, out.data(), out.size());
  return out;
}

// The secret bytes of an open file, after the checks ssh makes of a private key.
Result<std::vector<uint8_t>> read_secret_fd(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error(what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return invalid_argument(what + " is not a regular file");
  if (st.st_uid != ::geteuid())
    return invalid_argument(what + " is owned by uid " + std::to_string(st.st_uid) +
                            ", not by this user (uid " + std::to_string(::geteuid()) +
                            "): a secret must be the server's own");
  if ((st.st_mode & 077) != 0)
    return invalid_argument(what + " may be read or written by others (mode " +
                            std::to_string((st.st_mode >> 6) & 7) +
                            std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
                            "): run chmod 600 on it");
  std::vector<uint8_t> bytes(ServerSecret::kMaxFileBytes + 1);
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error(what + ": " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got > ServerSecret::kMaxFileBytes)
    return invalid_argument(what + " is larger than " +
                            std::to_string(ServerSecret::kMaxFileBytes) + " bytes");
  while (got > 0 && (bytes[got - 1] == '\n' || bytes[got - 1] == '\r' || bytes[got - 1] == ' ' ||
                     bytes[got - 1] == '\t'))
    --got;
  bytes.resize(got);
  if (got < ServerSecret::kMinFileBytes)
    return invalid_argument(what + " holds " + std::to_string(got) +
                            " bytes; a secret needs at least " +
                            std::to_string(ServerSecret::kMinFileBytes) +
                            " (e.g. head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE)");
  return bytes;
}

}  // namespace

ServerSecret ServerSecret::random() {
  ensure_sodium();
  ServerSecret s;
  randombytes_buf(s.master_.data(), s.master_.size());
  s.source_ = "random (this process only)";
  return s;
}

Result<ServerSecret> ServerSecret::read_file(const std::string& path) {
  ensure_sodium();
  const std::string what = "secret file " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) return invalid_argument(what + " is a symbolic link; give the file itself");
    return io_error(what + ": " + std::strerror(errno));
  }
  Result<std::vector<uint8_t>> bytes = read_secret_fd(fd, what);
  ::close(fd);
  if (!bytes.is_ok()) return bytes.status();
  ServerSecret s;
  s.master_ = master_of(*bytes);
  sodium_memzero(bytes->data(), bytes->size());
  s.source_ = path;
  return s;
}

Result<ServerSecret> ServerSecret::load_or_create_in(int dirfd, const std::string& dir_path,
                                                     const std::string& name) {
  ensure_sodium();
  const std::string path = dir_path + "/" + name;
  int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    // Fresh random bytes under a temporary name, then linked into place: linkat never replaces
    // an existing file, so a secret is never overwritten and never half-written.
    uint8_t raw[32];
    randombytes_buf(raw, sizeof raw);
    char hex[2 * sizeof raw + 2];
    sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
    const size_t len = std::strlen(hex);
    hex[len] = '\n';
    char tmp_name[48];
    uint8_t r[8];
    randombytes_buf(r, sizeof r);
    std::snprintf(tmp_name, sizeof tmp_name, ".secret-%02x%02x%02x%02x%02x%02x%02x%02x.tmp", r[0],
                  r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    const int w =
        ::openat(dirfd, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (w < 0) return io_error(dir_path + ": cannot create its secret: " + std::strerror(errno));
    const bool ok = ::write(w, hex, len + 1) == static_cast<ssize_t>(len + 1) && ::fsync(w) == 0;
    ::close(w);
    const bool linked = ok && ::linkat(dirfd, tmp_name, dirfd, name.c_str(), 0) == 0;
    const int link_errno = errno;
    ::unlinkat(dirfd, tmp_name, 0);
    sodium_memzero(raw, sizeof raw);
    sodium_memzero(hex, sizeof hex);
    if (!ok) return io_error(path + ": cannot write the secret");
    if (!linked && link_errno != EEXIST)
      return io_error(path + ": cannot create the secret: " + std::strerror(link_errno));
    fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ELOOP) return invalid_argument(path + " is a symbolic link: refusing to use it");
    return io_error(path + ": " + std::strerror(errno));
  }
  Result<std::vector<uint8_t>> bytes = read_secret_fd(fd, "secret file " + path);
  ::close(fd);
  if (!bytes.is_ok()) return bytes.status();
  ServerSecret s;
  s.master_ = master_of(*bytes);
  sodium_memzero(bytes->data(), bytes->size());
  s.source_ = path;
  return s;
}

SecretKey ServerSecret::derive(std::string_view context8, uint64_t subkey_id) const {
  KVS_CHECK_MSG(context8.size() == crypto_kdf_CONTEXTBYTES, "a KDF context is 8 characters");
  static_assert(crypto_kdf_KEYBYTES == sizeof(SecretKey));
  SecretKey out{};
  char ctx[crypto_kdf_CONTEXTBYTES];
  std::memcpy(ctx, context8.data(), sizeof ctx);
  crypto_kdf_derive_from_key(out.data(), out.size(), subkey_id, ctx, master_.data());
  return out;
}

uint64_t ServerSecret::id() const {
  const SecretKey k = derive("kvs-sid1");
  uint64_t v = 0;
  std::memcpy(&v, k.data(), sizeof v);
  return v;
}

uint64_t keyed_hash64(const SecretKey& key, std::initializer_list<std::span<const uint8_t>> parts) {
  ensure_sodium();
  crypto_generichash_state st;
  // BLAKE2b's shortest output is 16 bytes; the first 8 are the hash.
  crypto_generichash_init(&st, key.data(), key.size(), crypto_generichash_BYTES_MIN);
  for (std::span<const uint8_t> p : parts) crypto_generichash_update(&st, p.data(), p.size());
  uint8_t out[crypto_generichash_BYTES_MIN];
  crypto_generichash_final(&st, out, sizeof out);
  uint64_t v = 0;
  std::memcpy(&v, out, sizeof v);
  return v;
}

Mac::Mac(const SecretKey& key) {
  ensure_sodium();
  crypto_generichash_init(&state_, key.data(), key.size(), kBytes);
}

Mac& Mac::update(std::span<const uint8_t> bytes) {
  crypto_generichash_update(&state_, bytes.data(), bytes.size());
  return *this;
}

void Mac::final(uint8_t out[kBytes]) { crypto_generichash_final(&state_, out, kBytes); }

void fill_random(std::span<uint8_t> out) {
  ensure_sodium();
  randombytes_buf(out.data(), out.size());
}

std::string random_hex(size_t bytes) {
  std::vector<uint8_t> raw(bytes);
  fill_random(raw);
  std::string hex(2 * bytes + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), raw.data(), raw.size());
  hex.pop_back();
  return hex;
}

bool mac_equal(const uint8_t a[Mac::kBytes], const uint8_t b[Mac::kBytes]) {
  return sodium_memcmp(a, b, Mac::kBytes) == 0;
}

}  // namespace kvs
