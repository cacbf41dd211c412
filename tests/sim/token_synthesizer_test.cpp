// TokenSynthesizer: prompts share exactly the tokens their hash ids say, siblings differ in their
// first token, untraced tails and outputs are private, every id is inside the vocabulary.
#include "sim/token_synthesizer.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvs {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

Trace small_trace() {
  Trace t;
  t.block_tokens = 8;
  t.requests = {
      {.input_tokens = 20, .output_tokens = 1, .hash_ids = {0, 1, 2}},  // 0
      {.input_tokens = 20, .output_tokens = 1, .hash_ids = {0, 1, 3}},  // 1: 16 shared with 0
      {.input_tokens = 20, .output_tokens = 1, .hash_ids = {0, 4, 5}},  // 2: 8 shared
      {.input_tokens = 20, .output_tokens = 1, .hash_ids = {0, 1, 2}},  // 3: = 0
      {.input_tokens = 30, .output_tokens = 1, .hash_ids = {0, 1}},     // 4: 16, then its own
      {.input_tokens = 30, .output_tokens = 1, .hash_ids = {0, 1}},     // 5: 16 with 4
      {.input_tokens = 12, .output_tokens = 1, .hash_ids = {}},         // 6: nothing
      {.input_tokens = 12, .output_tokens = 1, .hash_ids = {}},         // 7: nothing
      {.input_tokens = 12, .output_tokens = 1, .hash_ids = {7}},        // 8: another root
  };
  return t;
}

TEST(TokenSynthesizer, SharesExactlyWhatTheIdsShare) {
  const Trace t = small_trace();
  const TokenSynthesizer s(t, 1000);
  std::vector<std::vector<int32_t>> p(t.requests.size());
  for (size_t i = 0; i < p.size(); ++i) {
    s.prompt(i, &p[i]);
    ASSERT_EQ(p[i].size(), t.requests[i].input_tokens);
    for (int32_t tok : p[i]) {
      EXPECT_GE(tok, 0);
      EXPECT_LT(tok, 1000);
    }
  }
  EXPECT_EQ(common_prefix(p[0], p[1]), 16u);
  EXPECT_EQ(common_prefix(p[0], p[2]), 8u);
  EXPECT_EQ(common_prefix(p[0], p[3]), 20u);
  EXPECT_EQ(p[0], p[3]);
  EXPECT_EQ(common_prefix(p[4], p[5]), 16u);  // untraced tails are private
  EXPECT_EQ(common_prefix(p[0], p[4]), 16u);
  EXPECT_EQ(common_prefix(p[6], p[7]), 0u);
  EXPECT_EQ(common_prefix(p[6], p[0]), 0u);
  EXPECT_EQ(common_prefix(p[8], p[0]), 0u);
  // Siblings (children of id 1: 2 and 3; of 0: 1 and 4) differ from their first token on.
  EXPECT_NE(p[0][16], p[1][16]);
  EXPECT_NE(p[0][8], p[2][8]);
  // Outputs and tails: the upper half of the vocabulary, never a block's first token.
  for (size_t i = 0; i < p.size(); ++i) EXPECT_GE(s.output_token(i), 500);
  EXPECT_NE(s.output_token(4), s.output_token(5));
  EXPECT_GE(p[4][16], 500);
  EXPECT_EQ(s.first_token_wraps(), 0u);
}

TEST(TokenSynthesizer, CountsSiblingsBeyondTheFirstTokenRange) {
  Trace t;
  t.block_tokens = 4;
  for (uint64_t i = 0; i < 40; ++i)
    t.requests.push_back({.input_tokens = 8, .output_tokens = 1, .hash_ids = {0, 100 + i}});
  const TokenSynthesizer s(t, 64);  // 32 first tokens: children 32..39 of id 0 wrap
  EXPECT_EQ(s.first_token_wraps(), 8u);
  const TokenSynthesizer roomy(t, 128);
  EXPECT_EQ(roomy.first_token_wraps(), 0u);
}

TEST(TokenSynthesizer, IsDeterministic) {
  const Trace t = small_trace();
  const TokenSynthesizer a(t), b(t);
  std::vector<int32_t> x, y;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    a.prompt(i, &x);
    b.prompt(i, &y);
    EXPECT_EQ(x, y);
    EXPECT_TRUE(std::all_of(x.begin(), x.end(),
                            [](int32_t v) { return v >= 0 && v < int32_t(kDefaultSimVocab); }));
  }
}

}  // namespace
}  // namespace kvs
