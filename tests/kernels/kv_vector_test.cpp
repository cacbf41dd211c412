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

// What int8_had is for: a key with a few outlier channels (Gemma 3's keys) sets int8's one scale
// per vector, so every other channel is coarse; rotated, the outliers are spread over the vector
// and the error of the ordinary channels falls several-fold.
TEST(Int8HadVector, KeepsTheOrdinaryChannelsOfAKeyWithOutliers) {
  const uint32_t d = 256;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double err_int8 = 0, err_had = 0;
  for (int trial = 0; trial < 64; ++trial) {
    std::vector<float> x(d);
    for (float& e : x) e = nd(rng);
    x[3] = 60.0f;
    x[130] = -45.0f;
    std::vector<uint8_t> q(kv_vector_bytes(KvDtype::kInt8, d));
    std::vector<float> y(d);
    kv_vector_from_f32(KvDtype::kInt8, x.data(), d, q.data());
    kv_vector_to_f32(KvDtype::kInt8, q.data(), d, y.data(), 0);
    for (uint32_t i = 0; i < d; ++i) err_int8 += double(y[i] - x[i]) * (y[i] - x[i]);
    kv_vector_from_f32(KvDtype::kInt8Had, x.data(), d, q.data());
    kv_vector_to_f32(KvDtype::kInt8Had, q.data(), d, y.data(), 0);
    for (uint32_t i = 0; i < d; ++i) err_had += double(y[i] - x[i]) * (y[i] - x[i]);
  }
  EXPECT_LT(err_had * 4, err_int8) << "int8 " << err_int8 << ", int8_had " << err_had;
}

// What q8_0_had is for: a key whose outlier channels (SmolLM2's, Gemma 3's) fall in some of
// q8_0's 32-element blocks sets those blocks' scales, so their other elements are coarse; rotated,
// the outliers are spread over every block and the error of the whole vector falls.
TEST(RotatedVectorTest, Q8_0HadSpreadsTheOutlierBlocksError) {
  const uint32_t d = 64;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double err_q8 = 0, err_had = 0;
  for (int trial = 0; trial < 64; ++trial) {
    std::vector<float> x(d);
    for (float& e : x) e = nd(rng);
    x[5] = 40.0f;
    x[40] = -30.0f;
    std::vector<uint8_t> q(kv_vector_bytes(KvDtype::kQ8_0, d));
    std::vector<float> y(d);
    kv_vector_from_f32(KvDtype::kQ8_0, x.data(), d, q.data());
    kv_vector_to_f32(KvDtype::kQ8_0, q.data(), d, y.data(), 0);
    for (uint32_t i = 0; i < d; ++i) err_q8 += double(y[i] - x[i]) * (y[i] - x[i]);
    kv_vector_from_f32(KvDtype::kQ8_0Had, x.data(), d, q.data());
    kv_vector_to_f32(KvDtype::kQ8_0Had, q.data(), d, y.data(), 0);
    for (uint32_t i = 0; i < d; ++i) err_had += double(y[i] - x[i]) * (y[i] - x[i]);
  }
  EXPECT_LT(err_had * 2, err_q8) << "q8_0 " << err_q8 << ", q8_0_had " << err_had;
}

}  // namespace
}  // namespace kvs
