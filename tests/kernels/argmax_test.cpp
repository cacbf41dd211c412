// argmax (kernels/argmax.h) on every SIMD target: the lowest id of the largest logit for any
// length (both passes' tails included), ties anywhere, -inf and NaN entries; all -inf gives the
// first, all NaN gives 0; and whole vocabularies (SmolLM2's 49,152, Gemma 3's 262,144) with the
// maximum at either end, against a plain scalar loop.
#include "kernels/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernel_test_util.h"

namespace kvs {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The first index of the largest non-NaN value, -1 if there is none.
int32_t lowest_id_of_largest(const std::vector<float>& v) {
  int32_t want = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(v.size()); ++i)
    if (!std::isnan(v[i]) && (want < 0 || v[i] > v[want])) want = i;
  return want;
}

TEST(ArgmaxTest, LowestIdOfTheLargestLogitForEveryLength) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(-3, 3);
  test::for_each_target([&] {
    for (int n = 1; n < 160; ++n)
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> v(n);
        for (float& x : v) x = static_cast<float>(small(rng));  // many ties
        if (rep % 4 == 1) v[rng() % n] = -kInf;
        if (rep % 4 == 2) v[rng() % n] = kNaN;
        if (rep % 4 == 3) v[rng() % n] = kInf;
        const int32_t want = lowest_id_of_largest(v);
        ASSERT_EQ(argmax(v.data(), n), want < 0 ? 0 : want) << n << " " << rep;
      }
    const std::vector<float> all_low(33, -kInf), all_nan(17, kNaN);
    EXPECT_EQ(argmax(all_low.data(), 33), 0);
    EXPECT_EQ(argmax(all_nan.data(), 17), 0);
    std::vector<float> nan_then_low(70, kNaN);
    nan_then_low[41] = -kInf;
    nan_then_low[55] = -kInf;
    EXPECT_EQ(argmax(nan_then_low.data(), 70), 41);
  });
}

TEST(ArgmaxTest, WholeVocabularies) {
  std::mt19937 rng(5);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  test::for_each_target([&] {
    for (int32_t n : {49152, 262144, 262145})
      for (int32_t at : {0, 1, n / 2, n - 2, n - 1}) {
        std::vector<float> v(n);
        for (float& x : v) x = logit(rng);
        for (int32_t i = 0; i < n; i += 997) v[i] = kNaN;
        v[at] = 40.0f;
        if (at + 1 < n) v[at + 1] = 40.0f;  // a tie: the lower id wins
        ASSERT_EQ(argmax(v.data(), n), at) << n;
      }
  });
}

}  // namespace
}  // namespace kvs
