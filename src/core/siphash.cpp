#include "core/siphash.h"

#include <cstring>
#include <random>

namespace kvs {

namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

SipKey SipKey::random() {
  std::random_device rd;
  auto word = [&] { return (uint64_t{rd()} << 32) ^ rd(); };
  return SipKey{word(), word()};
}

uint64_t siphash24(const SipKey& key, std::string_view data) {
  // The initialization constants are "somepseudorandomlygeneratedbytes" in ASCII.
  SipState s{key.k0 ^ 0x736f6d6570736575ULL, key.k1 ^ 0x646f72616e646f6dULL,
             key.k0 ^ 0x6c7967656e657261ULL, key.k1 ^ 0x7465646279746573ULL};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const size_t n = data.size();
  const size_t whole = n / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) s.absorb(load_le64(p + i));
  // The last word: the remaining bytes, and the length modulo 256 in the top byte.
  uint64_t last = uint64_t{n & 0xff} << 56;
  for (size_t i = 0; i < n - whole; ++i) last |= uint64_t{p[whole + i]} << (8 * i);
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  // Keep the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char sink = diff;
  return sink == 0;
}

}  // namespace kvs
