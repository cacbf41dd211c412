// sampled_logprobs against a plain reference: log(exp(l_i) / sum_j exp(l_j)) in long double,
// over random logits, with ties ordered by id and the top list bounded by the vocabulary.
#include "engine/token_logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace kvs {
namespace {

long double reference_logprob(const std::vector<float>& logits, int32_t token) {
  long double z = 0;
  for (const float l : logits) z += std::exp(static_cast<long double>(l));
  return static_cast<long double>(logits[token]) - std::log(z);
}

TEST(TokenLogprobs, MatchTheDefinitionOnRandomLogits) {
  std::mt19937 rng(11);
  for (const int32_t vocab : {1, 2, 7, 1000, 49152}) {
    std::normal_distribution<float> dist(0.0f, 4.0f);
    std::vector<float> logits(vocab);
    for (float& l : logits) l = dist(rng);
    const int32_t token = static_cast<int32_t>(rng() % vocab);
    const SampledLogprobs lp = sampled_logprobs(logits.data(), vocab, token, 5);
    EXPECT_EQ(lp.sampled.token, token);
    EXPECT_NEAR(lp.sampled.logprob, static_cast<double>(reference_logprob(logits, token)), 1e-5);
    ASSERT_EQ(lp.top.size(), static_cast<size_t>(std::min(5, vocab)));
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    double total = 0;
    for (size_t i = 0; i < lp.top.size(); ++i) {
      EXPECT_EQ(lp.top[i].token, order[i]);
      EXPECT_NEAR(lp.top[i].logprob,
                  static_cast<double>(reference_logprob(logits, lp.top[i].token)), 1e-5);
      EXPECT_LE(lp.top[i].logprob, 0.0f);
      total += std::exp(static_cast<double>(lp.top[i].logprob));
    }
    EXPECT_LE(total, 1.0 + 1e-6);
    if (vocab == 1) {
      EXPECT_NEAR(lp.sampled.logprob, 0.0f, 1e-7);
    }
  }
}

TEST(TokenLogprobs, LargeLogitsDoNotOverflow) {
  std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  const SampledLogprobs lp = sampled_logprobs(logits.data(), 3, 1, 3);
  EXPECT_NEAR(lp.sampled.logprob, -1.0 - std::log1p(std::exp(-1.0)), 1e-5);
  EXPECT_TRUE(std::isfinite(lp.top[2].logprob));
}

TEST(TokenLogprobs, TiesAreOrderedByIdAndZeroTopIsEmpty) {
  std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
  const SampledLogprobs lp = sampled_logprobs(logits.data(), 5, 0, 4);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_EQ(lp.top[1].token, 2);
  EXPECT_EQ(lp.top[2].token, 4);
  EXPECT_EQ(lp.top[3].token, 0);
  EXPECT_TRUE(sampled_logprobs(logits.data(), 5, 0, 0).top.empty());
  EXPECT_EQ(sampled_logprobs(logits.data(), 5, 0, 100).top.size(), 5u);
}

}  // namespace
}  // namespace kvs
