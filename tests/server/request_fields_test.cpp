// request_fields: which request fields are honoured, refused with a 400 naming them, ignored,
// or unknown (logged once, bounded, escaped).
#include "server/request_fields.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvs {
namespace {

using nlohmann::json;

std::optional<FieldProblem> check(const std::string& body, bool chat,
                                  std::vector<std::string>* unknown = nullptr) {
  std::vector<std::string> local;
  return check_request_fields(json::parse(body), chat, unknown ? unknown : &local);
}

TEST(RequestFields, FeaturesKvserveLacksAreRefusedByName) {
  for (const char* body :
       {R"({"tools": [{"type": "function", "function": {"name": "f"}}]})",
        R"({"response_format": {"type": "json_object"}})", R"({"prompt_logprobs": 1})",
        R"({"logit_bias": {"50": 5}})", R"({"best_of": 3})",
        R"({"guided_json": {"type": "object"}})", R"({"echo": true})", R"({"min_p": 0.1})"}) {
    const auto p = check(body, true);
    ASSERT_TRUE(p.has_value()) << body;
    EXPECT_NE(std::string(body).find(p->field), std::string::npos) << body;
    EXPECT_NE(p->message.find("not supported"), std::string::npos) << p->message;
  }
}

TEST(RequestFields, ValuesThatAskForNothingAreAccepted) {
  // What clients send by default must keep working.
  for (const char* body :
       {R"({"tools": [], "tool_choice": "none", "logprobs": false, "top_logprobs": 0})",
        R"({"response_format": {"type": "text"}, "best_of": 1, "echo": false})",
        R"({"logit_bias": {}, "suffix": null, "skip_special_tokens": true})",
        R"({"user": "u-1", "metadata": {"a": "b"}, "store": false})"}) {
    std::vector<std::string> unknown;
    EXPECT_FALSE(check(body, true, &unknown).has_value()) << body;
    EXPECT_TRUE(unknown.empty()) << body;
  }
}

TEST(RequestFields, UnknownFieldsAreReportedNotRefused) {
  std::vector<std::string> unknown;
  EXPECT_FALSE(check(R"({"prompt": "x", "frobnicate": 1, "messages": []})", false, &unknown));
  // "messages" is the chat route's field: unknown on completions.
  EXPECT_EQ(unknown, (std::vector<std::string>{"frobnicate", "messages"}));
  unknown.clear();
  EXPECT_FALSE(
      check(R"({"messages": [], "min_tokens": 3, "presence_penalty": 1})", true, &unknown));
  EXPECT_TRUE(unknown.empty());
}

TEST(RequestFields, UnknownNamesAreLoggedOnceEscapedAndBounded) {
  std::string text;
  {
    UnknownFieldLog log([&](const std::string& line) { text += line + "\n"; });
    log.note({"a", "a", "line\nbreak"});
    log.note({"a"});
    std::vector<std::string> many;
    for (int i = 0; i < 200; ++i) many.push_back("f" + std::to_string(i));
    log.note(many);
    log.note({std::string(1000, 'z')});
  }
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = text.find(s); p != std::string::npos; p = text.find(s, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("field 'a' "), 1u);
  EXPECT_EQ(count("field 'line\\x0abreak'"), 1u);  // no raw newline from a client
  // 64 names in all, then one line saying the rest are not logged.
  EXPECT_EQ(count("is not known"), UnknownFieldLog::kMaxNames);
  EXPECT_EQ(count("later ones are not"), 1u);
  EXPECT_EQ(count("zzzz"), 0u);  // after the cap: not logged
  EXPECT_EQ(UnknownFieldLog::printable(std::string(100, 'q')), std::string(64, 'q') + "...");
}

}  // namespace
}  // namespace kvs
