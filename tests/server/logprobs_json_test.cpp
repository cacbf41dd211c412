// Logprobs bodies in OpenAI's shapes: chat's content list with bytes, completions' parallel
// lists with the sampled token always in its top object, and partial UTF-8 shown as bytes:.
#include "server/logprobs_json.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvs {
namespace {

using nlohmann::json;

std::vector<TokenLogprobText> two_tokens() {
  return {{.bytes = " Paris",
           .logprob = -0.25f,
           .text_offset = 0,
           .top = {{" Paris", -0.25f}, {" Lyon", -2.0f}}},
          {.bytes = "\xe2\x80", .logprob = -1.5f, .text_offset = 6, .top = {{".", -0.5f}}}};
}

TEST(LogprobsJson, TokensThatAreNotWholeCharactersAreShownAsBytes) {
  EXPECT_EQ(token_display(" Paris"), " Paris");
  EXPECT_EQ(token_display("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(token_display("\xe2\x80"), "bytes:\\xe2\\x80");
  EXPECT_EQ(token_display("a\xff"), "bytes:\\x61\\xff");
  EXPECT_EQ(token_display(""), "");
}

TEST(LogprobsJson, ChatCarriesTokenLogprobBytesAndTopList) {
  const auto tokens = two_tokens();
  const json j = chat_logprobs_json(tokens);
  ASSERT_EQ(j["content"].size(), 2u);
  EXPECT_TRUE(j["refusal"].is_null());
  const json& first = j["content"][0];
  EXPECT_EQ(first["token"], " Paris");
  EXPECT_FLOAT_EQ(first["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(first["bytes"], json::array({32, 80, 97, 114, 105, 115}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], " Lyon");
  EXPECT_EQ(first["top_logprobs"][1]["bytes"], json::array({32, 76, 121, 111, 110}));
  const json& second = j["content"][1];
  EXPECT_EQ(second["token"], "bytes:\\xe2\\x80");
  EXPECT_EQ(second["bytes"], json::array({0xe2, 0x80}));
}

TEST(LogprobsJson, CompletionsListsInParallelWithTheSampledTokenInItsTop) {
  const auto tokens = two_tokens();
  const json j = completion_logprobs_json(tokens);
  EXPECT_EQ(j["tokens"], json::array({" Paris", "bytes:\\xe2\\x80"}));
  EXPECT_EQ(j["text_offset"], json::array({0, 6}));
  ASSERT_EQ(j["token_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(j["token_logprobs"][1].get<float>(), -1.5f);
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
  // The sampled token was not among the top alternatives: it is added (logprobs + 1 keys).
  EXPECT_EQ(j["top_logprobs"][1].size(), 2u);
  EXPECT_FLOAT_EQ(j["top_logprobs"][1]["bytes:\\xe2\\x80"].get<float>(), -1.5f);
  const json empty = completion_logprobs_json({});
  EXPECT_TRUE(empty["tokens"].empty() && empty["top_logprobs"].empty());
}

}  // namespace
}  // namespace kvs
