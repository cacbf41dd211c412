// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudo-random function with a 128-bit key
// and a 64-bit output. Used where a hash must not be computable (or its collisions craftable)
// by someone who does not hold the key: tenant labels in /metrics, the comparison of API keys.
// Not for bulk data (xxHash is several times faster); inputs here are short strings.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace kvs {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
  // A key drawn from std::random_device (per process).
  [[nodiscard]] static SipKey random();
};

[[nodiscard]] uint64_t siphash24(const SipKey& key, std::string_view data);

// True when a == b, in time that depends only on the sizes (no early exit on the first
// differing byte).
[[nodiscard]] bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace kvs
