// Scheduling policy without a model: the engine's own step (StepDriver, so the same scheduler,
// cache manager and request checks as Engine) over a stand-in backend whose "forward pass"
// records what ran and whose "sampling" is a function of the tokens. Orders are read from what
// the steps ran, never from clocks. (scheduler_test.cpp keeps the checks that need the real
// model: that preempted and swapped sequences produce the same text.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_driver.h"
#include "kvcache/kv_geometry.h"
#include "kvcache/kv_pool_plan.h"

namespace kvs {
namespace {

constexpr uint32_t kBlockSize = 16;
constexpr uint32_t kVocab = 49152;  // SmolLM2's, so that the request checks see a real bound

// Records the order in which sequences first ran and "samples" a token from the prefix.
class RecordingBackend : public StepBackend {
 public:
  double now() override { return static_cast<double>(steps_); }
  void transfer(const KvTransferPlan&) override {}
  void forward(const StepPlan& plan) override {
    ++steps_;
    for (const ScheduledChunk& ch : plan.chunks)
      if (std::find(first_runs_.begin(), first_runs_.end(), ch.seq->id) == first_runs_.end())
        first_runs_.push_back(ch.seq->id);
  }
  int32_t sample(size_t, Sequence& s) override {
    const uint64_t sum = std::accumulate(s.tokens.begin(), s.tokens.end(), uint64_t{0});
    return static_cast<int32_t>(1 + (sum * 31 + s.tokens.size()) % 1000);
  }
  // Every sequence's id, in the order of its first forward pass.
  [[nodiscard]] std::vector<uint64_t> first_runs() const {
    std::vector<uint64_t> out;
    for (SeqId id : first_runs_) out.push_back(id.value);
    return out;
  }

 private:
  uint64_t steps_ = 0;
  std::vector<SeqId> first_runs_;
};

struct DriverConfig {
  uint32_t pool_blocks = 64;
  uint32_t max_num_seqs = 64;
  uint32_t max_model_len = 4096;
};

std::unique_ptr<StepDriver> make_driver(const DriverConfig& c) {
  const KvUniformShape unit{.layers = 2, .kv_heads = 1, .head_dim_k = 8, .head_dim_v = 8};
  const uint64_t block_bytes = kv_token_bytes(unit).bytes_per_token * kBlockSize;
  auto pool = plan_kv_pool(unit, c.pool_blocks * block_bytes, kBlockSize);
  EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
  EXPECT_EQ(pool->num_blocks, c.pool_blocks);
  return std::make_unique<StepDriver>(
      StepDriverConfig{.pool = *pool,
                       .cache = pool_cache_config(*pool, true, /*fingerprint=*/1, /*seed=*/7),
                       .scheduler = {.max_num_seqs = c.max_num_seqs},
                       .max_model_len = c.max_model_len,
                       .vocab_size = kVocab});
}

SequenceRequest greedy(std::vector<int32_t> prompt, uint32_t max_tokens, int32_t priority = 0) {
  return {.prompt = std::move(prompt),
          .max_tokens = max_tokens,
          .ignore_eos = true,
          .priority = priority};
}

// Runs every queued sequence to completion, checking the cache after each step.
void run_to_completion(StepDriver& d, StepBackend& b) {
  for (int steps = 0; d.has_unfinished(); ++steps) {
    ASSERT_LT(steps, 10000) << "no progress";
    (void)d.step(b);
    const Status st = d.cache().check_integrity();
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
}

std::vector<int32_t> prompt_of(int32_t first, uint32_t len) {
  std::vector<int32_t> p(len);
  std::iota(p.begin(), p.end(), first);
  return p;
}

TEST(SchedulerPolicyTest, PriorityOrdersAdmissionLowerNumberFirst) {
  auto d = make_driver({.max_num_seqs = 1});
  const std::vector<int32_t> p = prompt_of(100, 7);
  const SeqId a = *d->add(greedy(p, 4, /*priority=*/5));
  const SeqId b = *d->add(greedy(p, 4, /*priority=*/0));
  const SeqId c = *d->add(greedy(p, 4, /*priority=*/5));
  RecordingBackend backend;
  run_to_completion(*d, backend);
  // More important first, then FCFS within a priority.
  EXPECT_EQ(backend.first_runs(), (std::vector<uint64_t>{b.value, a.value, c.value}));
}

TEST(SchedulerPolicyTest, VictimsAreTheLeastImportant) {
  // Eight requests of 2-3 blocks each (the four prompts twice) over an 8-block pool: preemptions
  // are certain. The most important request is the newest, the first victim among equals: only
  // its priority spares it.
  auto d = make_driver({.pool_blocks = 8});
  std::vector<SeqId> ids;
  for (int r = 0; r < 2; ++r)
    for (uint32_t len : {6u, 20u, 8u, 14u}) {
      const int32_t priority = ids.size() == 7 ? -1 : 0;
      const std::vector<int32_t> prompt = prompt_of(1000 * static_cast<int32_t>(len), len);
      ids.push_back(*d->add(greedy(prompt, 24, priority)));
    }
  RecordingBackend backend;
  run_to_completion(*d, backend);
  EXPECT_GT(d->scheduler().num_preemptions(), 0u);
  EXPECT_EQ(d->sequence(ids[7]).num_preemptions, 0u);
  for (SeqId id : ids) {
    EXPECT_EQ(d->sequence(id).status, SeqStatus::kFinished);
    EXPECT_EQ(d->sequence(id).num_generated(), 24u);
  }
  EXPECT_EQ(d->cache().counters().blocks_in_use, 0u);
}

// What the engine refuses at add(), whatever runs the steps: an empty prompt, max_tokens 0, an
// id outside the vocabulary, prompt + max_tokens over max_model_len or over the whole pool, bad
// sampling parameters.
TEST(SchedulerPolicyTest, RejectsRequestsThatCannotFit) {
  auto d = make_driver({.pool_blocks = 4, .max_model_len = 100});
  EXPECT_FALSE(d->add({.prompt = {}, .max_tokens = 4}).is_ok());
  EXPECT_FALSE(d->add({.prompt = {1, 2}, .max_tokens = 0}).is_ok());
  EXPECT_FALSE(d->add({.prompt = {1, 999999}, .max_tokens = 4}).is_ok());
  EXPECT_FALSE(d->add({.prompt = std::vector<int32_t>(90, 5), .max_tokens = 20}).is_ok());
  EXPECT_FALSE(d->add({.prompt = std::vector<int32_t>(60, 5), .max_tokens = 20})
                   .is_ok());  // > 64-token pool
  EXPECT_FALSE(d->add({.prompt = {1}, .sampling = {.temperature = -1}, .max_tokens = 4}).is_ok());
  EXPECT_TRUE(d->add({.prompt = {1, 2}, .max_tokens = 4}).is_ok());
}

}  // namespace
}  // namespace kvs
