// EngineWorker on the real default model: the preemption pattern that crashed the server (a
// victim preempted and re-admitted in one step produces its last token, so its request is closed
// before the step's preemption events are read), and usage reporting whole blocks only.
#include "server/engine_worker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "engine/engine_test_util.h"
#include "support/tiny_model.h"

namespace kvs {
namespace {

using test::make_engine;

constexpr uint64_t kTokenBytes = 23040;  // SmolLM2-135M, f16

struct Finished {
  std::string text;
  Usage usage;
  Status error;
};

Finished wait_all(const std::shared_ptr<RequestChannel>& ch) {
  Finished f;
  std::vector<ChoiceDelta> deltas;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!ch->wait(&deltas, std::chrono::milliseconds(100))) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "request did not finish";
      break;
    }
  }
  for (const ChoiceDelta& d : deltas) f.text += d.text;
  f.usage = ch->usage();
  f.error = ch->error();
  return f;
}

GenerationRequest request(std::vector<int32_t> prompt, uint32_t max_tokens) {
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.ignore_eos = true;
  return g;
}

// The server crash's pattern, made deterministic: every request is queued before the engine
// thread starts. 32 blocks of 16 tokens; seven 40-token prompts (identical, or each with its own
// tokens) grow to 65 KV slots = 5 blocks each, 35 in all: more than the pool.
void run_preemption_pattern(bool prefix_caching, bool identical, PreemptionMode mode,
                            uint64_t* preemptions) {
  LoadedModel* model = test::shared_model();
  auto engine = make_engine(*model, {.kv_cache_memory = 32 * 16 * kTokenBytes,
                                     .threads = 1,
                                     .enable_prefix_caching = prefix_caching,
                                     .max_model_len = 512,
                                     .preemption_mode = mode,
                                     .swap_space = 64ull << 20});
  ServerMetrics metrics;
  EngineWorker worker(*engine, *model->tokenizer, metrics,
                      {.max_in_flight = 64, .log_preemptions = true});
  std::vector<int32_t> long_prompt(300);
  std::iota(long_prompt.begin(), long_prompt.end(), 1000);
  std::vector<int32_t> prompt(40);
  std::iota(prompt.begin(), prompt.end(), 5000);
  std::vector<std::shared_ptr<RequestChannel>> channels;
  if (identical) channels.push_back(worker.submit(worker.try_reserve(), request(long_prompt, 1)));
  for (int i = 0; i < 7; ++i) {
    if (!identical) std::iota(prompt.begin(), prompt.end(), 5000 + 100 * i);
    channels.push_back(worker.submit(worker.try_reserve(), request(prompt, 26)));
  }
  worker.start();
  std::vector<Finished> done;
  for (const auto& ch : channels) done.push_back(wait_all(ch));
  worker.stop();
  for (const Finished& f : done) EXPECT_TRUE(f.error.is_ok()) << f.error.to_string();
  for (size_t i = identical ? 1 : 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].usage.completion_tokens, 26u);
    if (identical) {
      EXPECT_EQ(done[i].text, done[1].text) << "identical greedy prompts";
    }
  }
  EXPECT_TRUE(engine->check_integrity().is_ok());
  EXPECT_EQ(engine->snapshot().cache.blocks_in_use, 0u);
  *preemptions = engine->num_preemptions();
}

TEST(EngineWorkerTest, PreemptionsInBothModesAreLoggedFromTheirEvents) {
  REQUIRE_MODEL();
  (void)model;
  // Seven distinct prompts overflow the pool: victims are preempted, logged and resumed. The
  // worker logs from the event alone (request id and sample index travel in it): the old one
  // looked the sequence up, which crashed ("unknown sequence") when the victim had been
  // re-admitted and finished in the same step (tests/server/test_hardening.py replays that).
  for (bool prefix_caching : {true}) {
    for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
      uint64_t preemptions = 0;
      run_preemption_pattern(prefix_caching, /*identical=*/false, mode, &preemptions);
      EXPECT_GT(preemptions, 0u) << preemption_mode_name(mode);
    }
  }
}

TEST(EngineWorkerTest, IdenticalPromptsShareInsteadOfOverflowingThePool) {
  REQUIRE_MODEL();
  (void)model;
  // With prefix caching the later six wait one step for the first one's blocks and share
  // them: 2 shared + 7 x 3 private blocks fit in 32, so nobody is preempted.
  uint64_t preemptions = 0;
  run_preemption_pattern(true, /*identical=*/true, PreemptionMode::kRecompute, &preemptions);
  EXPECT_EQ(preemptions, 0u);
}

// Usage accounting needs an engine, not real weights: the tiny synthetic model.
TEST(EngineWorkerTest, CachedTokensAreReportedInWholeBlocks) {
  LoadedModel* model = test::tiny_model();
  ASSERT_NE(model, nullptr);
  auto engine = make_engine(
      *model,
      {.kv_cache_memory = 64 * 16 * test::TinyModelShape::kKvBytesPerTokenF16, .threads = 1});
  ServerMetrics metrics;
  EngineWorker worker(*engine, *model->tokenizer, metrics, {});
  worker.start();
  std::vector<int32_t> secret(50);
  std::iota(secret.begin(), secret.end(), 30);
  ASSERT_TRUE(wait_all(worker.submit(worker.try_reserve(), request(secret, 1))).error.is_ok());
  for (uint32_t k : {18u, 19u, 20u, 21u, 37u}) {
    // A probe that shares exactly k tokens with the earlier prompt.
    std::vector<int32_t> probe(secret.begin(), secret.begin() + k);
    probe.push_back(9);
    probe.push_back(10);
    const Finished f = wait_all(worker.submit(worker.try_reserve(), request(probe, 1)));
    EXPECT_EQ(f.usage.cached_tokens, k / 16 * 16) << "k = " << k;
  }
  worker.stop();
}

TEST(EngineWorkerTest, TicketsBoundTheRequestsInFlight) {
  LoadedModel* model = test::tiny_model();
  ASSERT_NE(model, nullptr);
  auto engine = make_engine(
      *model,
      {.kv_cache_memory = 64 * 16 * test::TinyModelShape::kKvBytesPerTokenF16, .threads = 1});
  ServerMetrics metrics;
  EngineWorker worker(*engine, *model->tokenizer, metrics, {.max_in_flight = 2});
  AdmissionTicket a = worker.try_reserve(), b = worker.try_reserve();
  EXPECT_TRUE(a && b);
  EXPECT_FALSE(worker.try_reserve());
  EXPECT_EQ(worker.in_flight(), 2u);
  { AdmissionTicket dropped = std::move(a); }  // e.g. the body was invalid: the place is back
  EXPECT_EQ(worker.in_flight(), 1u);
  EXPECT_TRUE(worker.try_reserve());
}

}  // namespace
}  // namespace kvs
