// SipHash-2-4 against the reference vectors of the SipHash paper (key 00..0f, message
// 00..len-1), and the constant-time comparison.
#include "core/siphash.h"

#include <gtest/gtest.h>

#include <string>

namespace kvs {
namespace {

std::string counting_bytes(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i));
  return s;
}

TEST(SipHashTest, ReferenceVectors) {
  const SipKey key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  EXPECT_EQ(siphash24(key, counting_bytes(0)), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(siphash24(key, counting_bytes(1)), 0x74f839c593dc67fdULL);
  EXPECT_EQ(siphash24(key, counting_bytes(8)), 0x93f5f5799a932462ULL);
  EXPECT_EQ(siphash24(key, counting_bytes(15)), 0xa129ca6149be45e5ULL);
}

TEST(SipHashTest, DependsOnTheKey) {
  const SipKey a = SipKey::random(), b = SipKey::random();
  EXPECT_NE(siphash24(a, "salt"), siphash24(b, "salt"));
  EXPECT_EQ(siphash24(a, "salt"), siphash24(a, "salt"));
}

TEST(ConstantTimeEqualTest, ComparesLikeEquals) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

}  // namespace
}  // namespace kvs
