// Sampler on synthetic logits: greedy below the temperature threshold (no NaN weights from a
// tiny temperature), seeded reproducibility, top-k / top-p support sets.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace kvs {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.5f};

TEST(SamplerTest, ZeroAndTinyTemperaturesAreGreedy) {
  // 3e-39 made 1/T infinite: every weight was NaN and the last candidate (the least likely
  // token) came out.
  for (float t : {0.0f, 3e-39f, 1e-30f, 1e-6f, 9.9e-6f}) {
    Sampler s({.temperature = t, .seed = 7});
    for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(kLogits.data(), 6), 1) << t;  // lowest id
  }
}

// Temperature alone (no top-k, no top-p) draws from softmax(logits / T) without sorting: the
// frequencies of 40,000 draws match the probabilities, a NaN or -inf logit is never drawn, and a
// row whose largest logit is not finite falls back to argmax.
TEST(SamplerTest, TemperatureAloneDrawsTheSoftmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1.0f, nan, 2.0f, -inf, 0.0f, 2.0f};
  const float t = 0.7f;
  std::vector<double> p(logits.size(), 0.0);
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) z += p[i] = std::exp((logits[i] - 2.0) / t);
  Sampler s({.temperature = t, .seed = 11});
  const int draws = 40000;
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++count[s.sample(logits.data(), 6)];
  EXPECT_EQ(count[1], 0);
  EXPECT_EQ(count[3], 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double want = p[i] / z;
    // 5 standard deviations of a binomial count.
    EXPECT_NEAR(count[i] / double(draws), want, 5 * std::sqrt(want * (1 - want) / draws) + 1e-9)
        << i;
  }
  const std::vector<float> all_low = {-inf, -inf, nan};
  EXPECT_EQ(s.sample(all_low.data(), 3), 0);
}

TEST(SamplerTest, SameSeedSameDraws) {
  Sampler a({.temperature = 1.0f, .seed = 42}), b({.temperature = 1.0f, .seed = 42});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(kLogits.data(), 6), b.sample(kLogits.data(), 6));
}

TEST(SamplerTest, TopKAndTopPLimitTheCandidates) {
  std::set<int32_t> seen_k, seen_p, seen_all;
  Sampler k({.temperature = 2.0f, .top_k = 2, .seed = 1});
  Sampler p({.temperature = 1.0f, .top_p = 0.5f, .seed = 1});
  Sampler all({.temperature = 50.0f, .seed = 1});
  for (int i = 0; i < 2000; ++i) {
    seen_k.insert(k.sample(kLogits.data(), 6));
    seen_p.insert(p.sample(kLogits.data(), 6));
    seen_all.insert(all.sample(kLogits.data(), 6));
  }
  EXPECT_EQ(seen_k, (std::set<int32_t>{1, 4}));  // the two 3.0 logits
  // softmax: ids 1 and 4 carry ~0.36 each, so the nucleus of 0.5 is exactly those two.
  EXPECT_EQ(seen_p, (std::set<int32_t>{1, 4}));
  EXPECT_EQ(seen_all.size(), 6u);  // a flat distribution reaches every token
}

// top-p without top-k orders only the nucleus (a growing prefix), yet draws exactly what a full
// sort of the vocabulary draws: the old algorithm, written out here, with the same seed gives the
// same tokens, for nuclei from one token to most of the vocabulary, with ties, -inf and NaN.
TEST(SamplerTest, TopPOrdersOnlyTheNucleusAndDrawsAsAFullSort) {
  const auto full_sort_draw = [](std::vector<float> logits, float t, float top_p,
                                 std::mt19937_64& rng) {
    std::vector<std::pair<float, int32_t>> c;
    for (size_t i = 0; i < logits.size(); ++i)
      c.push_back({std::isnan(logits[i]) ? -INFINITY : logits[i], static_cast<int32_t>(i)});
    std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    const float max_logit = c[0].first;
    std::vector<float> w(c.size());
    double total = 0;
    for (size_t i = 0; i < c.size(); ++i) total += w[i] = std::exp((c[i].first - max_logit) / t);
    size_t keep = c.size();
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      cum += w[i] / total;
      if (cum >= top_p) {
        keep = i + 1;
        break;
      }
    }
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += w[i];
    double r = std::uniform_real_distribution<double>(0.0, kept)(rng);
    for (size_t i = 0; i < keep; ++i) {
      r -= w[i];
      if (r <= 0) return c[i].second;
    }
    return c[keep - 1].second;
  };
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int n : {1, 7, 64, 65, 600, 5000, 40000})
    for (float top_p : {0.05f, 0.5f, 0.9f, 0.999f})
      for (float t : {0.3f, 1.0f, 4.0f}) {
        std::vector<float> logits(n);
        for (float& x : logits) x = normal(gen);
        for (int i = 0; i + 3 < n; i += 5) logits[i + 3] = logits[i];  // ties
        if (n > 10) logits[n / 2] = -INFINITY, logits[n / 3] = NAN;
        const uint64_t seed = n * 131 + static_cast<uint64_t>(top_p * 1000) + t * 7;
        Sampler s({.temperature = t, .top_p = top_p, .seed = seed});
        std::mt19937_64 ref_rng(seed);
        for (int d = 0; d < 20; ++d)
          ASSERT_EQ(s.sample(logits.data(), n), full_sort_draw(logits, t, top_p, ref_rng))
              << "n " << n << " top_p " << top_p << " T " << t << " draw " << d;
      }
}

TEST(SamplerTest, ValidateNamesTheField) {
  EXPECT_FALSE(SamplingParams{.temperature = -1}.validate().is_ok());
  EXPECT_NE(SamplingParams{.top_p = 0}.validate().message().find("top_p"), std::string::npos);
  EXPECT_NE(SamplingParams{.top_k = -2}.validate().message().find("top_k"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().is_ok());
}

// The penalties, against a direct reading of their definitions (vLLM / OpenAI).
TEST(SamplerTest, PenaltiesFollowTheirDefinitions) {
  // vocab 6; prompt has tokens 0 and 1; output so far: 1, 2, 2.
  const std::vector<int32_t> prompt = {0, 1}, output = {1, 2, 2}, eog = {5};
  const SamplingContext ctx{.prompt = prompt, .output = output, .eog_ids = eog};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> l = kLogits;  // {1, 3, 2.5, -1, 3, 0.5}
  apply_penalties(p, ctx, l.data(), 6);
  // token 0 (prompt only): repetition only, positive: 1 / 2.
  EXPECT_FLOAT_EQ(l[0], 0.5f);
  // token 1 (prompt and output once): 3 / 2 - 0.5 x 1 - 0.25.
  EXPECT_FLOAT_EQ(l[1], 1.5f - 0.5f - 0.25f);
  // token 2 (output twice): 2.5 / 2 - 0.5 x 2 - 0.25.
  EXPECT_FLOAT_EQ(l[2], 1.25f - 1.0f - 0.25f);
  // tokens 3, 4, 5 never seen: unchanged (a negative seen logit would be multiplied).
  EXPECT_FLOAT_EQ(l[3], -1.0f);
  EXPECT_FLOAT_EQ(l[4], 3.0f);
  EXPECT_FLOAT_EQ(l[5], 0.5f);
  std::vector<float> neg = {-2.0f, 0.0f};
  SamplingParams r;
  r.repetition_penalty = 1.5f;
  const std::vector<int32_t> seen = {0, 1};
  apply_penalties(r, {.prompt = seen, .output = {}, .eog_ids = {}}, neg.data(), 2);
  EXPECT_FLOAT_EQ(neg[0], -3.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(neg[1], 0.0f);
}

TEST(SamplerTest, GreedyWithPenaltiesPicksThePenalizedArgmax) {
  // Greedy picks token 1 (3.0, lowest id on the tie with 4); once 1 was generated, a presence
  // penalty moves the choice to 4.
  SamplingParams p;
  p.presence_penalty = 0.1f;
  Sampler s(p);
  const std::vector<int32_t> none, once = {1};
  EXPECT_EQ(s.sample(kLogits.data(), 6, {.prompt = none, .output = none, .eog_ids = none}), 1);
  EXPECT_EQ(s.sample(kLogits.data(), 6, {.prompt = none, .output = once, .eog_ids = none}), 4);
  // The model's logits are not changed.
  EXPECT_FLOAT_EQ(kLogits[1], 3.0f);
}

TEST(SamplerTest, MinTokensMasksEndOfGenerationUntilReached) {
  SamplingParams p;
  p.min_tokens = 2;
  Sampler s(p);
  const std::vector<float> eos_best = {0.0f, 1.0f, 9.0f};
  const std::vector<int32_t> eog = {2}, none, one = {1}, two = {1, 1};
  EXPECT_EQ(s.sample(eos_best.data(), 3, {.prompt = none, .output = none, .eog_ids = eog}), 1);
  EXPECT_EQ(s.sample(eos_best.data(), 3, {.prompt = none, .output = one, .eog_ids = eog}), 1);
  EXPECT_EQ(s.sample(eos_best.data(), 3, {.prompt = none, .output = two, .eog_ids = eog}), 2);
  // Sampled (not greedy): the masked token is never drawn.
  SamplingParams t = p;
  t.temperature = 1.0f;
  t.seed = 7;
  Sampler hot(t);
  for (int i = 0; i < 200; ++i)
    ASSERT_NE(hot.sample(eos_best.data(), 3, {.prompt = none, .output = one, .eog_ids = eog}), 2);
}

TEST(SamplerTest, PenaltyRangesAreValidated) {
  SamplingParams p;
  p.presence_penalty = 2.5f;
  EXPECT_NE(p.validate().message().find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = -3.0f;
  EXPECT_NE(p.validate().message().find("frequency_penalty"), std::string::npos);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_NE(p.validate().message().find("repetition_penalty"), std::string::npos);
}

}  // namespace
}  // namespace kvs
