#include "core/byte_size.h"

#include <gtest/gtest.h>

#include "core/half.h"

namespace kvs {
namespace {

TEST(ByteSizeTest, ParsesDecimalAndBinaryUnits) {
  EXPECT_EQ(*parse_byte_size("4096"), 4096u);
  EXPECT_EQ(*parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(*parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(*parse_byte_size("80GB"), 80'000'000'000ull);
  EXPECT_EQ(*parse_byte_size("1.5 GB"), 1'500'000'000ull);
  EXPECT_EQ(*parse_byte_size("64kb"), 64'000ull);
  EXPECT_EQ(*parse_byte_size("1e9"), 1'000'000'000ull);
}

TEST(ByteSizeTest, RejectsGarbageWithAClearMessage) {
  for (const char* bad : {"", "MiB", "12 parsecs", "-5GB", "1..2GB", "1e999"}) {
    auto r = parse_byte_size(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
  }
  EXPECT_NE(parse_byte_size("12 parsecs").status().message().find("unknown unit"),
            std::string::npos);
}

TEST(ByteSizeTest, RejectsSizesThatWouldSaturateOrWrap) {
  // 1e19 used to go through llround (long long) and saturate: an "unbounded" swap space.
  for (const char* big : {"1e19", "1.8e19", "2e19", "2e18", "1048577TiB"}) {
    auto r = parse_byte_size(big);
    EXPECT_FALSE(r.is_ok()) << big;
    EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << big;
  }
  EXPECT_EQ(*parse_byte_size("1024TiB"), 1ull << 50);
  EXPECT_EQ(*parse_byte_size("1152921504606846976"), kMaxByteSize);
  EXPECT_EQ(*parse_byte_size("0.5"), 1u);  // rounded to the nearest byte
}

TEST(ByteSizeTest, Formats) {
  EXPECT_EQ(format_thousands(23040), "23,040");
  EXPECT_EQ(format_thousands(999), "999");
  EXPECT_EQ(format_bytes_binary(512ull << 20), "512.00 MiB");
  EXPECT_EQ(format_bytes_decimal(80'000'000'000ull), "80.00 GB");
}

TEST(HalfTest, RoundTripsEveryF16AndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (f != f) continue;  // NaN payloads
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3C00);  // tie -> even
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);                // overflow -> inf
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
}

}  // namespace
}  // namespace kvs
