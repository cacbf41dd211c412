#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/hadamard_rotation.h"
#include "kernels/kernel_test_util.h"
#include "quant/hadamard.h"

namespace kvs {
namespace {

// Every SIMD target gives the scalar transform's bits, so a rotated format's stored bytes and
// its attention do not depend on the CPU (the ISA-equality tests of the attention rely on it).
TEST(HadamardRotation, SameBitsAsScalarOnEveryTarget) {
  std::mt19937 rng(7);
  for (uint32_t n = 1; n <= 1024; n *= 2) {
    for (float scale : {1e-30f, 1e-3f, 1.0f, 3e4f}) {
      auto x = test::random_floats(n + 2, scale, rng);  // a guard before and after the row
      if (n >= 8) x[1 + n / 3] *= 50.0f;                // an outlier channel, as RoPE'd keys have
      std::vector<float> ref(x.begin() + 1, x.begin() + 1 + n);
      hadamard_inplace(ref.data(), n);
      test::for_each_target([&] {
        std::vector<float> y = x;  // odd offset: unaligned rows
        hadamard_rotate(y.data() + 1, n);
        ASSERT_EQ(std::memcmp(y.data() + 1, ref.data(), n * sizeof(float)), 0) << "n " << n;
        ASSERT_EQ(y[0], x[0]) << "wrote before the row, n " << n;
        ASSERT_EQ(y[n + 1], x[n + 1]) << "wrote after the row, n " << n;
      });
    }
  }
}

// Against the definition, not the scalar code: (H x)_i = sum_j (-1)^popcount(i & j) x_j /
// sqrt(n), in double; and the rotation is its own inverse.
TEST(HadamardRotation, IsTheNormalizedHadamardAndItsOwnInverse) {
  std::mt19937 rng(8);
  for (uint32_t n : {4u, 16u, 64u, 128u, 256u}) {
    const auto x = test::random_floats(n, 2.0f, rng);
    test::for_each_target([&] {
      std::vector<float> y = x;
      hadamard_rotate(y.data(), n);
      for (uint32_t i = 0; i < n; ++i) {
        double want = 0;
        for (uint32_t j = 0; j < n; ++j)
          want += (__builtin_popcount(i & j) % 2 ? -1.0 : 1.0) * x[j];
        want /= std::sqrt(static_cast<double>(n));
        ASSERT_NEAR(y[i], want, 1e-5 * std::sqrt(static_cast<double>(n))) << n << " " << i;
      }
      hadamard_rotate(y.data(), n);
      for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << n << " " << i;
    });
  }
}

}  // namespace
}  // namespace kvs
