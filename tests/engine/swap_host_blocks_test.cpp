// swap_host_blocks: the one rule for swap's share of the host area, used by Engine::create
// (serve --swap-space) and by the simulator (tests/sim/swap_space_test.cpp).
#include <gtest/gtest.h>

#include "engine/step_driver.h"
#include "engine_test_util.h"

namespace kvs {
namespace {

using test::make_engine;

TEST(SwapHostBlocks, WholeBlocksInSwapModeNoneInRecompute) {
  EXPECT_EQ(swap_host_blocks(PreemptionMode::kSwap, 1000, 100).value(), 10u);
  EXPECT_EQ(swap_host_blocks(PreemptionMode::kSwap, 1099, 100).value(), 10u);
  EXPECT_EQ(swap_host_blocks(PreemptionMode::kSwap, 100, 100).value(), 1u);
  EXPECT_EQ(swap_host_blocks(PreemptionMode::kRecompute, 1000, 100).value(), 0u);
  EXPECT_EQ(swap_host_blocks(PreemptionMode::kRecompute, 0, 100).value(), 0u);
  EXPECT_EQ(swap_host_blocks(PreemptionMode::kSwap, ~uint64_t{0}, 1).value(),
            static_cast<uint32_t>(kMaxPoolBlocks));
}

TEST(SwapHostBlocks, SwapModeNeedsRoomForABlock) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{99}}) {
    const auto r = swap_host_blocks(PreemptionMode::kSwap, bytes, 100);
    ASSERT_FALSE(r.is_ok()) << bytes;
    EXPECT_EQ(r.status().message(),
              "--preemption-mode swap needs --swap-space of at least one block (100 B)");
  }
}

// The engine and the simulator disagreed here: the simulator refused swap mode with less than
// a block of --swap-space, the engine (serve --swap-space 1KiB) quietly ran with no swap area and
// recomputed every victim. Both refuse now.
TEST(SwapHostBlocks, TheEngineRefusesASwapAreaOfNoBlock) {
  REQUIRE_MODEL();
  EngineConfig c{.kv_cache_memory = 64ull << 20, .threads = 1};
  // Recompute mode ignores --swap-space.
  c.swap_space = 1024;
  auto recompute = make_engine(*model, c);
  EXPECT_EQ(recompute->snapshot().swap_space_bytes, 0u);
  const uint64_t block_bytes = recompute->kv_pool().block_bytes;
  c.preemption_mode = PreemptionMode::kSwap;
  c.model_fingerprint = model->fingerprint;
  for (uint64_t bytes : {uint64_t{1024}, block_bytes - 1}) {
    c.swap_space = bytes;
    auto e = Engine::create(*model->model, c);
    ASSERT_FALSE(e.is_ok()) << bytes;
    EXPECT_EQ(e.status().message(),
              swap_host_blocks(PreemptionMode::kSwap, bytes, block_bytes).status().message());
  }
  // Room for exactly one block: a swap area of one block.
  c.swap_space = block_bytes;
  EXPECT_EQ(make_engine(*model, c)->snapshot().swap_space_bytes, block_bytes);
}

}  // namespace
}  // namespace kvs
