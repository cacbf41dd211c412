// Shared fixtures of the engine tests: the default model loaded once per test binary, and an
// engine built for it.
#pragma once

#include <gtest/gtest.h>

#include <map>
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

// The greedy tokens (EOS ignored) of each of the n samples of one request, by sample index: the
// samples fork after the prompt, sharing its blocks copy-on-write.
inline std::map<uint32_t, std::vector<int32_t>> forked_samples(Engine& e,
                                                               const std::vector<int32_t>& prompt,
                                                               uint32_t max_tokens, uint32_t n) {
  std::map<uint32_t, std::vector<int32_t>> samples;
  auto id = e.add_request({.prompt = prompt, .max_tokens = max_tokens, .ignore_eos = true, .n = n});
  EXPECT_TRUE(id.is_ok()) << id.status().to_string();
  if (!id.is_ok()) return samples;
  while (e.has_unfinished())
    for (const StepOutput& o : e.step()) samples[o.index].push_back(o.token);
  return samples;
}

// Greedy output of long_chat_prompt under `c` (with a recent-token window) is the same in one
// prefill, in chunks of 16 and 48 tokens (each chunk reads the rows before it from the window's
// rings), and on a second run that hits the prefix cache up to the window floor only. `make`
// builds an engine from a config (a fixture's, which adds its K/V formats).
template <typename Make>
void expect_chunks_and_hits_keep_output(LoadedModel& m, EngineConfig c, Make make) {
  const auto p = long_chat_prompt(m);
  EngineConfig plain = c;
  plain.enable_prefix_caching = false;
  const auto expect = run_all(*make(plain), {p}, 24)[0];
  for (uint32_t chunk : {16u, 48u}) {
    plain.max_num_batched_tokens = chunk;
    EXPECT_EQ(run_all(*make(plain), {p}, 24)[0], expect) << "chunk " << chunk;
  }
  auto on = make(c);
  std::vector<uint32_t> cached;
  EXPECT_EQ(run_all(*on, {p}, 24, &cached)[0], expect);
  EXPECT_EQ(run_all(*on, {p}, 24, &cached)[0], expect);
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[0], 0u);
  // Hits are whole blocks: the floor rounded down to the block size.
  const uint32_t bs = on->kv_pool().block_size;
  EXPECT_EQ(cached[1], RecentWindow::floor_of(uint32_t(p.size()) - 1, c.recent_window) / bs * bs);
  EXPECT_GT(cached[1], 0u);
}

// The mean negative log-likelihood of long_chat_prompt's tokens from position 48 on under a
// quantized pool, with a recent-token window of `window` tokens (rows in `rows`) and the attention
// sink or not, in blocks of `block_size`.
inline double score_long_chat_prompt(LoadedModel& m, KvDtype k, KvDtype v, uint32_t window,
                                     bool attention_sink, KvDtype rows = KvDtype::kF16,
                                     uint32_t block_size = 16) {
  EngineConfig c{.kv_cache_memory = 256ull << 20,
                 .block_size = block_size,
                 .k_dtype = k,
                 .v_dtype = v,
                 .threads = 2,
                 .max_num_seqs = 4};
  c.recent_window = window;
  c.recent_window_dtype = rows;
  c.attention_sink = attention_sink;
  auto e = Engine::create(*m.model, c);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  if (!e.is_ok()) return 0;
  auto id = (*e)->add_request({.prompt = long_chat_prompt(m), .max_tokens = 0, .score_from = 48});
  EXPECT_TRUE(id.is_ok());
  while ((*e)->has_unfinished()) (void)(*e)->step();
  const Sequence& s = (*e)->sequence(*id);
  EXPECT_GT(s.prompt_scored, 0u);
  return s.prompt_nll / s.prompt_scored;
}

}  // namespace kvs::test

// Declares `model` (the shared default model), or skips the test when it is missing (fails it
// under CI=true: support/prerequisites.h).
#define REQUIRE_MODEL()                             \
  LoadedModel* model = ::kvs::test::shared_model(); \
  if (model == nullptr)                             \
  SKIP_OR_FAIL_IN_CI() << "default model not found at " << default_model_path()
