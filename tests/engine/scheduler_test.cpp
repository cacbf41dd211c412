// Scheduler behaviour on the real default model: swap and recompute preemption keep greedy
// outputs, n > 1 forks share the prompt's blocks. (Priorities, victims and the request checks,
// which need no model, are scheduler_policy_test.cpp.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"

namespace kvs {
namespace {

using test::make_engine;

constexpr uint64_t kTokenBytes = 23040;  // SmolLM2-135M, f16

const char* kPrompts[] = {
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about memory.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea, there lived",
};

std::vector<std::vector<int32_t>> prompts_x(LoadedModel& m, int repeats) {
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < repeats; ++r)
    for (const char* p : kPrompts) out.push_back(m.tokenizer->encode(p, true, true));
  return out;
}

// Runs every request to completion, checking the cache after each step.
std::vector<std::vector<int32_t>> run_all(Engine& e, std::vector<SequenceRequest> reqs,
                                          std::vector<SeqId>* ids_out = nullptr) {
  std::vector<SeqId> ids;
  for (auto& r : reqs) {
    auto id = e.add_request(std::move(r));
    EXPECT_TRUE(id.is_ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  while (e.has_unfinished()) {
    (void)e.step();
    const Status st = e.check_integrity();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  }
  std::vector<std::vector<int32_t>> out;
  for (SeqId id : ids) {
    const Sequence& s = e.sequence(id);
    out.emplace_back(s.tokens.begin() + s.prompt_len, s.tokens.end());
  }
  if (ids_out) *ids_out = ids;
  return out;
}

std::vector<SequenceRequest> greedy(const std::vector<std::vector<int32_t>>& prompts,
                                    uint32_t max_tokens) {
  std::vector<SequenceRequest> r;
  for (const auto& p : prompts)
    r.push_back({.prompt = p, .max_tokens = max_tokens, .ignore_eos = true});
  return r;
}

TEST(SchedulerTest, SwapPreemptionKeepsOutputs) {
  REQUIRE_MODEL();
  const auto prompts = prompts_x(*model, 2);
  auto roomy = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  const auto expect = run_all(*roomy, greedy(prompts, 24));
  auto tight = make_engine(*model, {.kv_cache_memory = 8 * 16 * kTokenBytes,
                                    .preemption_mode = PreemptionMode::kSwap,
                                    .swap_space = 64ull << 20});
  EXPECT_EQ(run_all(*tight, greedy(prompts, 24)), expect);
  EXPECT_GT(tight->num_preemptions(PreemptionMode::kSwap), 0u);
  EXPECT_EQ(tight->num_preemptions(PreemptionMode::kRecompute), 0u);
  EXPECT_EQ(tight->snapshot().cache.blocks_in_use, 0u);
  EXPECT_EQ(tight->snapshot().swap_used_bytes, 0u);
  const auto events = tight->take_preemption_events();
  ASSERT_FALSE(events.empty());
  EXPECT_GT(events[0].blocks, 0u);
}

// Prompts that share their first tokens: admissions copy partial prefix blocks, possibly from
// blocks a swap-in has just restored (the copy must see the restored KV) or recycled.
TEST(SchedulerTest, SwapWithSharedPrefixesKeepsOutputs) {
  REQUIRE_MODEL();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i)
    prompts.push_back(model->tokenizer->encode("Story " + std::to_string(i) +
                                                   ": once upon a time, in a village number " +
                                                   std::to_string(i) + " by the sea, there lived a",
                                               true, true));
  auto roomy = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  const auto expect = run_all(*roomy, greedy(prompts, 16));
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    auto tight = make_engine(*model, {.kv_cache_memory = 12 * 16 * kTokenBytes,
                                      .preemption_mode = mode,
                                      .swap_space = 64ull << 20});
    EXPECT_EQ(run_all(*tight, greedy(prompts, 16)), expect) << preemption_mode_name(mode);
    EXPECT_GT(tight->num_preemptions(mode), 0u);
    EXPECT_EQ(tight->snapshot().cache.blocks_in_use, 0u);
  }
}

TEST(SchedulerTest, FullSwapAreaFallsBackToRecompute) {
  REQUIRE_MODEL();
  const auto prompts = prompts_x(*model, 2);
  auto roomy = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  const auto expect = run_all(*roomy, greedy(prompts, 24));
  // Room for one block in the swap area: most victims must be recomputed.
  auto tight = make_engine(*model, {.kv_cache_memory = 8 * 16 * kTokenBytes,
                                    .preemption_mode = PreemptionMode::kSwap,
                                    .swap_space = 16 * kTokenBytes});
  EXPECT_EQ(run_all(*tight, greedy(prompts, 24)), expect);
  EXPECT_GT(tight->num_preemptions(PreemptionMode::kRecompute), 0u);
  EXPECT_EQ(tight->snapshot().cache.blocks_in_use, 0u);
}

TEST(SchedulerTest, ForkedSamplesShareThePromptAndMatchASingleRun) {
  REQUIRE_MODEL();
  std::string text = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n";
  for (int i = 0; i < 6; ++i) text += "Count the apples in basket " + std::to_string(i) + ". ";
  text += "<|im_end|>\n<|im_start|>assistant\n";
  const auto p = model->tokenizer->encode(text, true, true);
  auto single = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  const auto expect = run_all(*single, greedy({p}, 12))[0];
  auto e = make_engine(*model, {.kv_cache_memory = 64ull << 20});
  auto reqs = greedy({p}, 12);
  reqs[0].n = 3;
  auto parent = e->add_request(std::move(reqs[0]));
  ASSERT_TRUE(parent.is_ok());
  std::vector<SeqId> children;
  bool checked_sharing = false;
  while (e->has_unfinished()) {
    for (const StepOutput& o : e->step()) {
      const Sequence& s = e->sequence(o.seq);
      if (s.parent == *parent && s.num_generated() == 1) children.push_back(o.seq);
    }
    if (!checked_sharing && children.size() == 2) {
      // Every full prompt block is shared by all three samples.
      const uint32_t full_blocks = e->sequence(*parent).prompt_len / 16;
      ASSERT_GE(full_blocks, 1u);
      uint32_t shared_by_three = 0;
      for (const BlockInfo& b : e->block_infos()) shared_by_three += b.refcount == 3;
      EXPECT_GE(shared_by_three, full_blocks);
      checked_sharing = true;
    }
    ASSERT_TRUE(e->check_integrity().is_ok());
  }
  ASSERT_EQ(children.size(), 2u);
  EXPECT_TRUE(checked_sharing);
  for (SeqId id : {*parent, children[0], children[1]}) {
    const Sequence& s = e->sequence(id);
    EXPECT_EQ(std::vector<int32_t>(s.tokens.begin() + s.prompt_len, s.tokens.end()), expect);
  }
  EXPECT_EQ(e->sequence(children[1]).index, 2u);
  EXPECT_EQ(e->snapshot().cache.blocks_in_use, 0u);
}

}  // namespace
}  // namespace kvs
