// The attention sink's copies as the step records them, without a model: the engine's own step
// (StepDriver) over a stand-in backend that takes the cache manager's start-row copies in its
// forward pass, as the engine's does. A prompt that computes position 0 publishes its first
// token's rows; a later prompt with a prefix hit adopts them; when the table (one entry per
// sequence) forgot the token the hit is refused and the prompt publishes again. A backend that
// takes nothing (the simulator's) finds the copies dropped after each step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/step_driver.h"
#include "kvcache/kv_geometry.h"
#include "kvcache/kv_pool_plan.h"
#include "kvcache/start_token_table.h"

namespace kvs {
namespace {

constexpr uint32_t kBlockSize = 16, kWindow = 16;

class CopyingBackend : public StepBackend {
 public:
  explicit CopyingBackend(bool takes) : takes_(takes) {}
  void attach(StepDriver* d) { driver_ = d; }
  double now() override { return static_cast<double>(steps_.size()); }
  void transfer(const KvTransferPlan&) override {}
  void forward(const StepPlan&) override {
    steps_.push_back(takes_ ? driver_->cache().take_start_row_copies()
                            : std::vector<StartRowCopy>{});
  }
  int32_t sample(size_t, Sequence&) override { return 3; }
  // Each step's copies, in order.
  std::vector<std::vector<StartRowCopy>> steps_;

 private:
  bool takes_;
  StepDriver* driver_ = nullptr;
};

std::unique_ptr<StepDriver> make_driver() {
  const KvUniformShape unit{.layers = 2, .kv_heads = 1, .head_dim_k = 8, .head_dim_v = 8};
  auto pool = plan_kv_pool(KvModelShape::uniform(unit), 1 << 20, kBlockSize, /*max_num_seqs=*/1,
                           kWindow, /*attention_sink=*/true);
  EXPECT_TRUE(pool.is_ok()) << pool.status().to_string();
  return std::make_unique<StepDriver>(
      StepDriverConfig{.pool = *pool,
                       .cache = pool_cache_config(*pool, true, /*fingerprint=*/1, /*seed=*/7),
                       .scheduler = {.max_num_seqs = 1, .recent_window = kWindow},
                       .max_model_len = 512,
                       .vocab_size = 1000});
}

std::vector<int32_t> prompt(int32_t first, uint32_t n) {
  std::vector<int32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(10 + (i * 7) % 900);
  p[0] = first;
  return p;
}

// Runs one request alone; returns its cached tokens and the copies of each of its steps.
uint32_t run(StepDriver& d, CopyingBackend& b, std::vector<int32_t> tokens,
             std::vector<std::vector<StartRowCopy>>* copies) {
  const size_t before = b.steps_.size();
  auto id = d.add({.prompt = std::move(tokens), .max_tokens = 2, .ignore_eos = true});
  EXPECT_TRUE(id.is_ok()) << id.status().to_string();
  uint32_t cached = 0;
  while (d.has_unfinished()) {
    for (const StepOutput& o : d.step(b)) cached = std::max(cached, o.cached_tokens);
    EXPECT_TRUE(d.cache().take_start_row_copies().empty());  // dropped after the forward pass
    const Status st = d.cache().check_integrity();
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  }
  d.release(*id);
  copies->assign(b.steps_.begin() + static_cast<std::ptrdiff_t>(before), b.steps_.end());
  return cached;
}

TEST(AttentionSinkScheduleTest, PublishAdoptAndRefuseAsTheTableSays) {
  auto d = make_driver();
  CopyingBackend b(/*takes=*/true);
  b.attach(d.get());
  const std::vector<StartRowCopy> publish{{.slot = 0, .entry = 0, .publish = true}};
  const std::vector<StartRowCopy> adopt{{.slot = 0, .entry = 0, .publish = false}};
  const std::vector<StartRowCopy> none;
  std::vector<std::vector<StartRowCopy>> copies;
  // A computes position 0: its first step publishes, its decode steps copy nothing.
  const auto a = prompt(5, 64);
  EXPECT_EQ(run(*d, b, a, &copies), 0u);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0], publish);
  EXPECT_EQ(copies[1], none);
  EXPECT_TRUE(d->cache().sink_knows(5));
  // B starts like A: a prefix hit, whose first step adopts token 5's rows.
  auto longer = a;
  longer.insert(longer.end(), 32, 11);
  EXPECT_GT(run(*d, b, longer, &copies), 0u);
  EXPECT_EQ(copies.at(0), adopt);
  // C starts with another token: with one entry it takes token 5's place.
  EXPECT_EQ(run(*d, b, prompt(7, 40), &copies), 0u);
  EXPECT_EQ(copies.at(0), publish);
  EXPECT_FALSE(d->cache().sink_knows(5));
  EXPECT_TRUE(d->cache().sink_knows(7));
  // B again: its blocks are cached but its first token is forgotten, so no hit and it publishes.
  EXPECT_EQ(run(*d, b, longer, &copies), 0u);
  EXPECT_EQ(copies.at(0), publish);
  EXPECT_EQ(d->scheduler().num_sink_refused_hits(), 1u);
  EXPECT_TRUE(d->cache().sink_knows(5));
}

TEST(AttentionSinkScheduleTest, ABackendWithoutRowsGetsTheSameSchedule) {
  auto d = make_driver();
  CopyingBackend b(/*takes=*/false);
  std::vector<std::vector<StartRowCopy>> copies;
  const auto a = prompt(5, 64);
  auto longer = a;
  longer.insert(longer.end(), 32, 11);
  EXPECT_EQ(run(*d, b, a, &copies), 0u);
  EXPECT_GT(run(*d, b, longer, &copies), 0u);
  EXPECT_EQ(run(*d, b, prompt(7, 40), &copies), 0u);
  EXPECT_EQ(run(*d, b, longer, &copies), 0u);
  EXPECT_EQ(d->scheduler().num_sink_refused_hits(), 1u);
}

}  // namespace
}  // namespace kvs
