// Sampler on synthetic logits: greedy below the temperature threshold (no NaN weights from a
// tiny temperature), seeded reproducibility, top-k / top-p support sets.
#include "engine/sampler.h"

#include <gtest/gtest.h>

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

TEST(SamplerTest, ValidateNamesTheField) {
  EXPECT_FALSE(SamplingParams{.temperature = -1}.validate().is_ok());
  EXPECT_NE(SamplingParams{.top_p = 0}.validate().message().find("top_p"), std::string::npos);
  EXPECT_NE(SamplingParams{.top_k = -2}.validate().message().find("top_k"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().is_ok());
}

}  // namespace
}  // namespace kvs
