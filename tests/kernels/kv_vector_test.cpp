// The scalar codecs of one head vector (kernels/kv_vector.h), for the rotated formats: what they
// store is the plain format's code of the rotated vector, and what they give back is the model's
// own vector.
#include "kernels/kv_vector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/hadamard.h"

namespace kvs {
namespace {

struct Rotated {
  KvDtype rotated, plain;
};

class RotatedVectorTest : public ::testing::TestWithParam<Rotated> {};

TEST_P(RotatedVectorTest, StoresThePlainCodeOfTheRotatedVector) {
  const auto [rotated, plain] = GetParam();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const uint32_t d : {32u, 64u, 256u}) {
    std::vector<float> x(d);
    for (float& e : x) e = nd(rng);
    std::vector<float> hx = x;
    hadamard_inplace(hx.data(), d);
    const uint64_t bytes = kv_vector_bytes(rotated, d);
    ASSERT_EQ(bytes, kv_vector_bytes(plain, d));
    std::vector<uint8_t> got(bytes), want(bytes);
    kv_vector_from_f32(rotated, x.data(), d, got.data());
    kv_vector_from_f32(plain, hx.data(), d, want.data());
    EXPECT_EQ(got, want) << d;
    // Decoding rotates back: the plain decode of the codes, rotated, element for element.
    std::vector<float> back(d), plain_back(d);
    kv_vector_to_f32(rotated, got.data(), d, back.data(), 0);
    kv_vector_to_f32(plain, want.data(), d, plain_back.data(), 0);
    hadamard_inplace(plain_back.data(), d);
    for (uint32_t i = 0; i < d; ++i) EXPECT_FLOAT_EQ(back[i], plain_back[i]) << d << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, RotatedVectorTest,
                         ::testing::Values(Rotated{KvDtype::kInt8Had, KvDtype::kInt8},
                                           Rotated{KvDtype::kQ8_0Had, KvDtype::kQ8_0},
                                           Rotated{KvDtype::kInt4Had, KvDtype::kInt4}),
                         [](const ::testing::TestParamInfo<Rotated>& info) {
                           return std::string(kv_dtype_name(info.param.rotated));
                         });

// The squared error of `dtype` over 64 Gaussian vectors of `d` elements with two outlier
// channels, (a, va) and (b, vb), as RoPE'd keys have (SmolLM2's, Gemma 3's).
double outlier_key_error(KvDtype dtype, uint32_t d, uint32_t a, float va, uint32_t b, float vb,
                         uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double err = 0;
  std::vector<float> x(d), y(d);
  std::vector<uint8_t> q(kv_vector_bytes(dtype, d));
  for (int trial = 0; trial < 64; ++trial) {
    for (float& e : x) e = nd(rng);
    x[a] = va;
    x[b] = vb;
    kv_vector_from_f32(dtype, x.data(), d, q.data());
    kv_vector_to_f32(dtype, q.data(), d, y.data(), 0);
    for (uint32_t i = 0; i < d; ++i) err += double(y[i] - x[i]) * (y[i] - x[i]);
  }
  return err;
}

// What int8_had is for: a key with a few outlier channels (Gemma 3's keys) sets int8's one scale
// per vector, so every other channel is coarse; rotated, the outliers are spread over the vector
// and the error of the ordinary channels falls several-fold.
TEST(Int8HadVector, KeepsTheOrdinaryChannelsOfAKeyWithOutliers) {
  const double plain = outlier_key_error(KvDtype::kInt8, 256, 3, 60.0f, 130, -45.0f, 5);
  const double rotated = outlier_key_error(KvDtype::kInt8Had, 256, 3, 60.0f, 130, -45.0f, 5);
  EXPECT_LT(rotated * 4, plain) << "int8 " << plain << ", int8_had " << rotated;
}

// What q8_0_had is for: outlier channels set the scales of the q8_0 blocks they fall in, so
// those blocks' other elements are coarse; rotated, the outliers are spread over every block and
// the error of the whole vector falls.
TEST(Q8_0HadVector, SpreadsTheOutlierBlocksError) {
  const double plain = outlier_key_error(KvDtype::kQ8_0, 64, 5, 40.0f, 40, -30.0f, 9);
  const double rotated = outlier_key_error(KvDtype::kQ8_0Had, 64, 5, 40.0f, 40, -30.0f, 9);
  EXPECT_LT(rotated * 2, plain) << "q8_0 " << plain << ", q8_0_had " << rotated;
}

}  // namespace
}  // namespace kvs
