#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/activations.h"
#include "kernels/kernel_test_util.h"
#include "kernels/paged_attention.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"

namespace kvs {
namespace {

const int64_t kSizes[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 576, 1536, 1537};

TEST(RmsNorm, MatchesReference) {
  std::mt19937 rng(1);
  for (int64_t n : kSizes) {
    for (float scale : {1e-3f, 1.0f, 1e3f}) {
      auto x = test::random_floats(n + 1, scale, rng);
      auto w = test::random_floats(n + 1, 2.0f, rng);
      std::vector<float> ref(n), out(n + 1);
      rms_norm_reference(x.data() + 1, w.data() + 1, n, 1e-5f, ref.data());
      test::for_each_target([&] {
        rms_norm(x.data() + 1, w.data() + 1, n, 1e-5f, out.data() + 1);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(out[i + 1], ref[i], 2e-6 * std::fabs(ref[i]) + 1e-30) << n << " " << i;
      });
    }
  }
}

TEST(RmsNorm, RowsAndInPlace) {
  std::mt19937 rng(2);
  const int64_t rows = 5, n = 576;
  auto x = test::random_floats(rows * n, 3.0f, rng);
  auto w = test::random_floats(n, 1.0f, rng);
  std::vector<float> ref(rows * n);
  for (int64_t r = 0; r < rows; ++r)
    rms_norm_reference(x.data() + r * n, w.data(), n, 1e-6f, ref.data() + r * n);
  rms_norm_rows(x.data(), w.data(), rows, n, 1e-6f, x.data());  // in place
  for (int64_t i = 0; i < rows * n; ++i)
    ASSERT_NEAR(x[i], ref[i], 2e-6 * std::fabs(ref[i]) + 1e-30) << i;
}

TEST(Rope, NormalModeRotatesAdjacentPairs) {
  // One head of 4: pairs (0,1) with theta = pos, (2,3) with theta = pos * base^-0.5.
  float x[4] = {1.0f, 0.0f, 0.0f, 1.0f};
  const int32_t pos = 3;
  rope_inplace(x, 1, 1, &pos, RopeConfig{.head_dim = 4, .rot_dim = 4, .freq_base = 100.0f});
  EXPECT_NEAR(x[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[2], -std::sin(0.3), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.3), 1e-6);
}

TEST(Rope, NeoxModeRotatesHalves) {
  float x[4] = {1.0f, 0.0f, 0.0f, 1.0f};  // pairs (0,2) and (1,3)
  const int32_t pos = 2;
  rope_inplace(
      x, 1, 1, &pos,
      RopeConfig{.head_dim = 4, .rot_dim = 4, .freq_base = 100.0f, .mode = RopeMode::kNeox});
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[1], -std::sin(0.2), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.2), 1e-6);
}

TEST(Rope, MatchesReference) {
  std::mt19937 rng(3);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int64_t head_dim : {2, 8, 64, 128}) {
      for (int64_t rot_dim : {head_dim, head_dim / 2 + (head_dim / 2) % 2}) {
        if (rot_dim == 0) continue;
        for (int64_t T : {1, 3, 9}) {
          const int64_t heads = 3;
          const RopeConfig cfg{
              .head_dim = head_dim, .rot_dim = rot_dim, .freq_base = 10000.0f, .mode = mode};
          auto x = test::random_floats(T * heads * head_dim + 1, 2.0f, rng);
          std::vector<float> ref(x.begin() + 1, x.end());
          std::vector<int32_t> pos(T);
          for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t * 977 % 40000);
          rope_inplace_reference(ref.data(), T, heads, pos.data(), cfg);
          test::for_each_target([&] {
            std::vector<float> y(x);
            rope_inplace(y.data() + 1, T, heads, pos.data(), cfg);
            for (size_t i = 0; i < ref.size(); ++i)
              ASSERT_NEAR(y[i + 1], ref[i], 2e-6 * 2.0) << head_dim << " " << rot_dim << " " << i;
          });
        }
      }
    }
  }
}

// Q and K rotated in one call (each token's angles computed once) give the bits of one call each.
TEST(Rope, QAndKInOneCallGiveTheBitsOfTwoCalls) {
  std::mt19937 rng(5);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    const RopeConfig cfg{.head_dim = 64, .rot_dim = 64, .freq_base = 10000.0f, .mode = mode};
    const int64_t T = 5, qh = 9, kh = 3;
    std::vector<int32_t> pos = {0, 7, 100, 4095, 131071};
    const auto q0 = test::random_floats(T * qh * 64, 2.0f, rng);
    const auto k0 = test::random_floats(T * kh * 64, 2.0f, rng);
    test::for_each_target([&] {
      std::vector<float> q1(q0), k1(k0), q2(q0), k2(k0);
      rope_inplace(q1.data(), T, qh, pos.data(), cfg);
      rope_inplace(k1.data(), T, kh, pos.data(), cfg);
      rope_inplace_qk(q2.data(), qh, k2.data(), kh, T, pos.data(), cfg);
      ASSERT_EQ(q1, q2);
      ASSERT_EQ(k1, k2);
    });
  }
}

// Angles computed once (RopeAngles) and applied to several layers' Q and K give the bits of
// computing them in every call, for both modes and a partial rotary dimension.
TEST(Rope, AnglesComputedOnceGiveTheBitsOfEveryCall) {
  std::mt19937 rng(6);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox})
    for (int64_t rot : {64, 40}) {
      const RopeConfig cfg{.head_dim = 64, .rot_dim = rot, .freq_base = 1e6f, .mode = mode};
      const int64_t T = 6, qh = 4, kh = 1;
      std::vector<int32_t> pos = {3, 0, 511, 512, 40000, 9};
      test::for_each_target([&] {
        RopeAngles angles;
        angles.compute(pos.data(), T, cfg);
        for (int layer = 0; layer < 3; ++layer) {
          const auto q0 = test::random_floats(T * qh * 64, 2.0f, rng);
          const auto k0 = test::random_floats(T * kh * 64, 2.0f, rng);
          std::vector<float> q1(q0), k1(k0), q2(q0), k2(k0);
          rope_inplace_qk(q1.data(), qh, k1.data(), kh, T, pos.data(), cfg);
          rope_inplace_qk(q2.data(), qh, k2.data(), kh, angles);
          ASSERT_EQ(q1, q2) << layer;
          ASSERT_EQ(k1, k2) << layer;
        }
      });
    }
}

// Threads that take disjoint token ranges of one step's angles give the bits of the whole call,
// and a range leaves the other tokens untouched.
TEST(Rope, TokenRangesGiveTheBitsOfTheWholeCall) {
  std::mt19937 rng(7);
  const RopeConfig cfg{.head_dim = 64, .rot_dim = 64, .freq_base = 10000.0f};
  const int64_t T = 7, qh = 3, kh = 1;
  std::vector<int32_t> pos = {0, 1, 2, 300, 301, 9000, 9001};
  RopeAngles angles;
  angles.compute(pos.data(), T, cfg);
  const auto q0 = test::random_floats(T * qh * 64, 2.0f, rng);
  const auto k0 = test::random_floats(T * kh * 64, 2.0f, rng);
  test::for_each_target([&] {
    std::vector<float> q1(q0), k1(k0), q2(q0), k2(k0);
    rope_inplace_qk(q1.data(), qh, k1.data(), kh, angles);
    rope_inplace_qk(q2.data(), qh, k2.data(), kh, angles, 4, 7);
    ASSERT_TRUE(std::equal(q0.begin(), q0.begin() + 4 * qh * 64, q2.begin()));
    ASSERT_TRUE(std::equal(k0.begin(), k0.begin() + 4 * kh * 64, k2.begin()));
    rope_inplace_qk(q2.data(), qh, k2.data(), kh, angles, 0, 4);
    ASSERT_EQ(q1, q2);
    ASSERT_EQ(k1, k2);
  });
}

TEST(Activations, SiluMulMatchesReference) {
  std::mt19937 rng(4);
  for (int64_t n : kSizes) {
    auto g = test::random_floats(n + 1, 12.0f, rng);
    auto u = test::random_floats(n + 1, 3.0f, rng);
    if (n > 4) {
      g[1] = -100.0f;
      g[2] = 100.0f;
      g[3] = 0.0f;
    }
    std::vector<float> ref(n), out(n + 1);
    silu_mul_reference(g.data() + 1, u.data() + 1, n, ref.data());
    test::for_each_target([&] {
      silu_mul(g.data() + 1, u.data() + 1, n, out.data() + 1);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(out[i + 1], ref[i], 4e-6 * std::fabs(ref[i]) + 1e-35) << n << " " << i;
    });
  }
}

TEST(Activations, GeluTanhMulMatchesReference) {
  std::mt19937 rng(6);
  for (int64_t n : kSizes) {
    auto g = test::random_floats(n + 1, 8.0f, rng);
    auto u = test::random_floats(n + 1, 3.0f, rng);
    if (n > 4) {
      g[1] = -100.0f;  // gelu -> -0
      g[2] = 100.0f;   // gelu -> g
      g[3] = 0.0f;
    }
    std::vector<float> ref(n), out(n + 1);
    gelu_tanh_mul_reference(g.data() + 1, u.data() + 1, n, ref.data());
    test::for_each_target([&] {
      gelu_tanh_mul(g.data() + 1, u.data() + 1, n, out.data() + 1);
      for (int64_t i = 0; i < n; ++i) {
        const double bound = 2e-6 * (std::fabs(g[i + 1]) + 1) * std::fabs(u[i + 1]) + 1e-30;
        ASSERT_NEAR(out[i + 1], ref[i], bound) << n << " " << i << " g=" << g[i + 1];
      }
    });
  }
}

TEST(Activations, SoftmaxMatchesReference) {
  std::mt19937 rng(5);
  for (int64_t n : kSizes) {
    for (float scale : {0.1f, 10.0f, 300.0f}) {
      auto x = test::random_floats(n + 1, scale, rng);
      std::vector<float> ref(x.begin() + 1, x.end());
      softmax_inplace_reference(ref.data(), n);
      test::for_each_target([&] {
        std::vector<float> y(x);
        softmax_inplace(y.data() + 1, n);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(y[i + 1], ref[i], 1e-5 * ref[i] + 1e-38) << n << " " << i;
          sum += y[i + 1];
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      });
    }
  }
}

// The attention's softmax step (its own exponential, for x <= 0): within 1 ulp of e^x computed in
// double where the target fuses multiply-adds, 1.5 where it does not (SSE4, scalar), for every
// 997th float of [-87, 0] (every exponent, many mantissas); 0 below -87.
TEST(AttentionSoftmax, ExpWithinOneUlpOfExact) {
  std::vector<float> xs;
  uint32_t top;
  const float limit = 87.0f;
  std::memcpy(&top, &limit, 4);
  for (uint32_t bits = 0; bits <= top; bits += 997) {
    float x;
    std::memcpy(&x, &bits, 4);
    xs.push_back(-x);
  }
  xs.push_back(-87.0f);
  test::for_each_target([&] {
    const bool fma = (hwy::SupportedTargets() & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) != 0;
    std::vector<float> y(xs);
    attention_exp_sub_and_sum(y.data(), static_cast<int32_t>(y.size()), 0.0f);
    for (size_t i = 0; i < xs.size(); ++i) {
      const double ref = std::exp(double(xs[i]));
      const float r = static_cast<float>(ref);
      const double ulp = double(std::nextafter(r, INFINITY)) - double(r);
      ASSERT_LE(std::fabs(double(y[i]) - ref), (fma ? 1.0 : 1.5) * ulp) << "x " << xs[i];
    }
    float low[3] = {-87.5f, -200.0f, -INFINITY};
    attention_exp_sub_and_sum(low, 3, 0.0f);
    for (float v : low) EXPECT_EQ(v, 0.0f);
  });
}

// A row's weights are the same whatever its length's remainder (the tail goes through the vector
// code), and the returned sum is theirs.
TEST(AttentionSoftmax, WeightsDoNotDependOnTheRowLength) {
  std::mt19937 rng(8);
  auto x = test::random_floats(100, 5.0f, rng);
  const float m = *std::max_element(x.begin(), x.end());
  test::for_each_target([&] {
    std::vector<float> full(x);
    attention_exp_sub_and_sum(full.data(), 100, m);
    for (int32_t n : {1, 3, 15, 16, 17, 33, 99}) {
      std::vector<float> part(x.begin(), x.begin() + n);
      const float s = attention_exp_sub_and_sum(part.data(), n, m);
      double sum = 0;
      for (int32_t i = 0; i < n; ++i) {
        ASSERT_EQ(part[i], full[i]) << n << " " << i;
        sum += part[i];
      }
      EXPECT_NEAR(s, sum, 1e-6 * sum) << n;
    }
  });
}

TEST(Activations, AddInplace) {
  std::mt19937 rng(6);
  for (int64_t n : kSizes) {
    auto x = test::random_floats(n + 1, 1.0f, rng);
    auto y = test::random_floats(n + 1, 1.0f, rng);
    std::vector<float> ref(x.begin() + 1, x.end());
    add_inplace_reference(ref.data(), y.data() + 1, n);
    test::for_each_target([&] {
      std::vector<float> z(x);
      add_inplace(z.data() + 1, y.data() + 1, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i + 1], ref[i]);
    });
  }
}

}  // namespace
}  // namespace kvs
