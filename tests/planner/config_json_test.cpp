// config_json: the lenient reader accepts Python's Infinity / -Infinity / NaN where a value stands
// (real configs have them) and nothing else strict JSON refuses.
#include "planner/config_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/model_config.h"

namespace kvs {
namespace {

TEST(ConfigJson, NonFiniteNumbersBecomeTheirSpellingAsStrings) {
  auto j = parse_config_json(R"({"time_step_limit": [0.0, Infinity], "a": -Infinity, "b": NaN})",
                             "c.json");
  ASSERT_TRUE(j.is_ok()) << j.status().to_string();
  EXPECT_EQ((*j)["time_step_limit"][0], 0.0);
  EXPECT_EQ((*j)["time_step_limit"][1], "Infinity");
  EXPECT_EQ((*j)["a"], "-Infinity");
  EXPECT_EQ((*j)["b"], "NaN");
}

TEST(ConfigJson, WordsInsideStringsAreLeftAlone) {
  // Keys and values that contain the words, quotes escaped inside them, and a backslash at the
  // end of a string: none is rewritten.
  const std::string text =
      R"({"Infinity": "NaN", "note": "to \"Infinity\" and beyond\\", "x": "-Infinity", )"
      R"("list": ["NaN", Infinity]})";
  EXPECT_EQ(quote_nonfinite_json_numbers(text),
            R"({"Infinity": "NaN", "note": "to \"Infinity\" and beyond\\", "x": "-Infinity", )"
            R"("list": ["NaN", "Infinity"]})");
  auto j = parse_config_json(text, "c.json");
  ASSERT_TRUE(j.is_ok()) << j.status().to_string();
  EXPECT_EQ((*j)["Infinity"], "NaN");
  EXPECT_EQ((*j)["note"], "to \"Infinity\" and beyond\\");
  EXPECT_EQ((*j)["list"][1], "Infinity");
}

TEST(ConfigJson, MalformedFilesAreStillRejectedWithTheirName) {
  for (const char* bad : {
           R"({"a": Inf})",            // not one of the three words
           R"({"a": Infinityx})",      // a longer word
           R"({"a": +Infinity})",      // Python never writes +Infinity
           R"({"a": - Infinity})",     // a sign apart from its word
           R"({"a": infinity})",       // case matters, as in Python
           R"({"a": 1,})",             // trailing comma
           R"({"a": "unterminated})",  // no closing quote
           R"({"a": Infinity)",        // no closing brace
           R"({'a': 1})",              // single quotes
           R"()",                      // empty
       }) {
    auto j = parse_config_json(bad, "bad.json");
    ASSERT_FALSE(j.is_ok()) << bad;
    EXPECT_EQ(j.status().message().rfind("bad.json: not valid JSON", 0), 0u)
        << bad << " -> " << j.status().message();
  }
}

TEST(ConfigJson, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto j = parse_config_json(deep, "deep.json");
  ASSERT_FALSE(j.is_ok());
  EXPECT_NE(j.status().message().find("nested deeper"), std::string::npos) << j.status().message();
}

TEST(ConfigJson, ANonFiniteSizeFieldFailsItsTypeCheck) {
  // A head count of Infinity is no number the planner can size with: a clear error naming it.
  auto j = parse_config_json(
      R"({"num_hidden_layers": 2, "num_attention_heads": Infinity, "hidden_size": 64})", "c.json");
  ASSERT_TRUE(j.is_ok());
  auto m = model_from_hf_config(*j, "c.json");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("'num_attention_heads' must be a non-negative integer"),
            std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace kvs
