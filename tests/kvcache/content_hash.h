// The randomized cache tests' stand-in for KV content: the "content id" of a position is a hash
// chained over the tenant and the tokens up to it, exactly what the real KV there depends on.
#pragma once

#include <cstdint>

namespace kvs::test {

// Chains v into h (a splitmix64 finaliser over a boost-style combine).
inline uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace kvs::test
