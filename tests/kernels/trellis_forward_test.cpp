// int2_tcq64's Viterbi pass in lanes (kernels/trellis_forward.h) against the scalar loop: the same
// costs and back pointers bit for bit on every SIMD target, so the stored bytes do not depend on
// the CPU.
#include "kernels/trellis_forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "quant/kv_trellis_groups.h"

namespace kvs {
namespace {

constexpr uint32_t N = kTrellisGroup;

TEST(TrellisForward, SameBitsAsScalarOnEveryTarget) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 44.0f);
  for (int t = 0; t < 60; ++t) {
    std::vector<float> x(N);
    for (float& v : x) v = nd(rng);
    if (t % 4 == 1)  // ties: values on the level grid, some repeated
      for (float& v : x) v = std::round(v / 8) * 8;
    if (t % 4 == 2) x[rng() % N] = 1024.0f;  // an outlier at the writer's clamp
    const int context = t % 3 == 0 ? -1 : static_cast<int>(rng() % 64);
    std::vector<float> want_cost(kTrellisStates), got_cost(kTrellisStates);
    std::vector<uint64_t> want_back(kTrellisBackWords), got_back(want_back.size());
    trellis_forward_scalar(x.data(), context, want_cost.data(), want_back.data());
    test::for_each_target([&] {
      std::fill(got_back.begin(), got_back.end(), ~uint64_t{0});
      trellis_forward(x.data(), context, got_cost.data(), got_back.data());
      ASSERT_EQ(std::memcmp(got_cost.data(), want_cost.data(), kTrellisStates * sizeof(float)), 0)
          << "vector " << t << " context " << context;
      // Step 0 has no predecessors: its back pointers are never read.
      ASSERT_EQ(std::memcmp(got_back.data() + 3, want_back.data() + 3,
                            (kTrellisBackWords - 3) * sizeof(uint64_t)),
                0)
          << "vector " << t << " context " << context;
    });
  }
}

TEST(TrellisForward, QuantizerStoresTheScalarBytesOnEveryTarget) {
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int t = 0; t < 20; ++t) {
    std::vector<float> x(4 * N);
    for (float& v : x) v = nd(rng) * std::pow(10.0f, float(t % 9) - 4.0f);
    if (t % 5 == 0) {
      x[rng() % x.size()] = INFINITY;
      x[rng() % x.size()] = NAN;
    }
    std::vector<uint8_t> want(4 * kTrellisGroupBytes), got(want.size());
    quantize_trellis(x.data(), 4 * N, want.data());
    test::for_each_target([&] {
      quantize_trellis_with(x.data(), 4 * N, got.data(), trellis_forward);
      ASSERT_EQ(got, want) << "vector " << t;
    });
  }
}

}  // namespace
}  // namespace kvs
