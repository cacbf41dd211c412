// f16_from_f32_rows (quant/f16_rows.h) against core/half.h's scalar f32_to_f16, bit for bit, on
// every SIMD target this CPU runs: each f16 value and the midpoints between neighbours (the
// round-to-nearest-even ties) with the floats either side of them, subnormals, the overflow
// edge, infinities, NaNs among finite values, random bit patterns, and every length and offset
// around the vector widths, into aligned and unaligned destinations.
#include "quant/f16_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "support/simd_targets.h"

namespace kvs {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Each f16 value as f32, the midpoint to the next one and the floats one ulp either side of each,
// for both signs; then the edges: zeros, f32 subnormals, the largest finite f16 and the overflow
// threshold, infinities and NaNs of several payloads.
std::vector<float> edge_values() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    const float a = f16_to_f32(static_cast<uint16_t>(h));
    const float b = f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = a + (b - a) / 2;  // exact: one more bit than f16 holds
    for (float x : {a, mid, std::nextafter(a, 0.0f), std::nextafter(a, 1e9f),
                    std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, from_bits(1), from_bits(0x007FFFFFu), 65504.0f, 65519.99f, 65520.0f,
                  1e10f, std::numeric_limits<float>::max(), inf, -inf})
    v.push_back(x);
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFFC12345u, 0xFFFFFFFFu})
    v.push_back(from_bits(nan));
  return v;
}

// x[offset..] converted into a byte buffer at byte `out_offset` (1: an unaligned destination),
// each value compared with the scalar routine's bits.
void expect_scalar_bits(const std::vector<float>& x, size_t offset = 0, size_t out_offset = 0) {
  const size_t n = x.size() - offset;
  std::vector<uint8_t> got(2 * n + out_offset, 0xAD);
  f16_from_f32_rows(x.data() + offset, n, got.data() + out_offset);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, got.data() + out_offset + 2 * i, 2);
    uint32_t bits;
    std::memcpy(&bits, &x[offset + i], 4);
    ASSERT_EQ(h, f32_to_f16(x[offset + i])) << "input bits 0x" << std::hex << bits;
  }
}

TEST(F16RowsTest, EveryHalfValueTieAndEdgeAsTheScalarRoutine) {
  const std::vector<float> x = edge_values();
  test::for_each_target([&] { expect_scalar_bits(x); });
}

TEST(F16RowsTest, RandomBitPatternsAsTheScalarRoutine) {
  std::mt19937 rng(7);
  std::vector<float> x(1 << 20);
  for (float& f : x) f = from_bits(static_cast<uint32_t>(rng()));
  test::for_each_target([&] { expect_scalar_bits(x); });
}

TEST(F16RowsTest, NaNAmongFiniteValuesAndEveryLengthAndOffsetAlignedOrNot) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  test::for_each_target([&] {
    for (size_t n = 0; n <= 70; ++n)
      for (size_t offset = 0; offset < 3; ++offset) {
        std::vector<float> x(n + offset);
        for (float& f : x) f = normal(rng);
        if (n > 5) x[offset + n / 2] = std::numeric_limits<float>::quiet_NaN();
        expect_scalar_bits(x, offset, offset % 2);
      }
  });
}

// The other way: every f16 bit pattern, NaNs (signaling and quiet) among them, read back as the
// scalar f16_to_f32 reads it, at every length and offset around the vector widths.
TEST(F16RowsTest, EveryHalfReadBackAsTheScalarRoutine) {
  // Every non-NaN pattern first (the SIMD loop takes the scalar one from a vector holding a NaN
  // on), both signs mixed, then every NaN.
  std::vector<uint16_t> h;
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto p = static_cast<uint16_t>((i * 40503u) & 0xFFFFu);  // a walk over all of them
    if ((p & 0x7C00u) != 0x7C00u || (p & 0x3FFu) == 0) h.push_back(p);
  }
  for (uint32_t i = 0; i < 65536; ++i)
    if ((i & 0x7C00u) == 0x7C00u && (i & 0x3FFu) != 0) h.push_back(static_cast<uint16_t>(i));
  test::for_each_target([&] {
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{7}})
      for (const size_t n : {h.size() - offset, size_t{0}, size_t{1}, size_t{15}, size_t{33}}) {
        std::vector<float> got(n + 1, -1.0f);
        f32_from_f16_rows(h.data() + offset, n, got.data());
        for (size_t i = 0; i < n; ++i) {
          const float want = f16_to_f32(h[offset + i]);
          ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0)
              << "f16 0x" << std::hex << h[offset + i] << " at " << std::dec << i;
        }
        ASSERT_EQ(got[n], -1.0f) << "wrote past the row";
      }
  });
}

}  // namespace
}  // namespace kvs
