// Shared fixtures of the engine tests: the default model loaded once per test binary, and an
// engine built for it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "support/prerequisites.h"

namespace kvs::test {

// The default model, loaded on first use; nullptr when it has not been fetched.
inline LoadedModel* shared_model() {
  static std::unique_ptr<LoadedModel> model = [] {
    auto m = load_model(default_model_path());
    return m.is_ok() ? std::make_unique<LoadedModel>(std::move(m).value()) : nullptr;
  }();
  return model.get();
}

// An engine for `m` with the model's fingerprint and end-of-generation tokens filled in
// (2 threads unless the config says otherwise).
inline std::unique_ptr<Engine> make_engine(LoadedModel& m, EngineConfig c) {
  c.model_fingerprint = m.fingerprint;
  c.eog_ids = m.eog_ids;
  if (c.threads == 0) c.threads = 2;
  auto e = Engine::create(*m.model, c);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return std::move(e).value();
}

// Tests over K/V format pairs: the pair, its test name ("int2_chan_int2_had"), and a fixture
// whose make() builds an engine (make_engine) in the pair.
struct KvFormats {
  KvDtype k, v;
};
inline std::string kv_formats_name(const ::testing::TestParamInfo<KvFormats>& info) {
  return std::string(kv_dtype_name(info.param.k)) + "_" + kv_dtype_name(info.param.v);
}
class KvFormatEngineTest : public ::testing::TestWithParam<KvFormats> {
 protected:
  std::unique_ptr<Engine> make(LoadedModel& m, EngineConfig c) {
    c.k_dtype = GetParam().k;
    c.v_dtype = GetParam().v;
    return make_engine(m, c);
  }
};

inline std::vector<int32_t> tokens_of(LoadedModel& m, const std::string& text) {
  return m.tokenizer->encode(text, true, true);
}

// A chat prompt of about 130 tokens (a system prompt of eight rules, then a question): long
// enough for several blocks and a prefix hit.
inline std::vector<int32_t> long_chat_prompt(LoadedModel& m) {
  std::string p = "<|im_start|>system\nYou are a careful assistant. ";
  for (int i = 0; i < 8; ++i)
    p += "Always answer briefly and cite the rule number " + std::to_string(i) + ". ";
  p += "<|im_end|>\n<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n";
  return tokens_of(m, p);
}

// Runs the prompts to completion (greedy, EOS ignored), checking the cache's integrity after
// every step, and returns each one's generated tokens (and, if asked, its cached token count).
inline std::vector<std::vector<int32_t>> run_all(Engine& e,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 uint32_t max_tokens,
                                                 std::vector<uint32_t>* cached = nullptr) {
  std::vector<SeqId> ids;
  for (const auto& p : prompts) {
    auto id = e.add_request({.prompt = p,
                             .sampling = {},
                             .max_tokens = max_tokens,
                             .cache_salt = "",
                             .ignore_eos = true});
    EXPECT_TRUE(id.is_ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  while (e.has_unfinished()) {
    (void)e.step();
    EXPECT_TRUE(e.check_integrity().is_ok());
  }
  std::vector<std::vector<int32_t>> out;
  for (SeqId id : ids) {
    const Sequence& s = e.sequence(id);
    out.emplace_back(s.tokens.begin() + s.prompt_len, s.tokens.end());
    if (cached) cached->push_back(s.cached_tokens);
    e.release(id);
  }
  return out;
}

}  // namespace kvs::test

// Declares `model` (the shared default model), or skips the test when it is missing (fails it
// under CI=true: support/prerequisites.h).
#define REQUIRE_MODEL()                             \
  LoadedModel* model = ::kvs::test::shared_model(); \
  if (model == nullptr)                             \
  SKIP_OR_FAIL_IN_CI() << "default model not found at " << default_model_path()
