// The simulator sizes its swap area with the engine's rule (swap_host_blocks, step_driver.h).
#include <gtest/gtest.h>

#include "engine/step_driver.h"
#include "sim_test_util.h"

namespace kvs {
namespace {

TEST(SimSwapSpace, HostBlocksAreTheEnginesSwapShare) {
  test::use_source_data_dir();
  SimArgs a = test::llama_h100_args();
  a.preemption_mode = "swap";
  a.swap_space = "1GiB";
  const SimSetup s = test::resolve_or_die(a);
  EXPECT_EQ(s.host_blocks,
            swap_host_blocks(PreemptionMode::kSwap, uint64_t{1} << 30, s.pool.block_bytes).value());
  EXPECT_EQ(s.host_blocks, (uint64_t{1} << 30) / s.pool.block_bytes);
  a.swap_space = std::to_string(s.pool.block_bytes - 1);
  auto r = resolve_sim(a);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            swap_host_blocks(PreemptionMode::kSwap, s.pool.block_bytes - 1, s.pool.block_bytes)
                .status()
                .message());
  a.preemption_mode = "recompute";
  EXPECT_EQ(test::resolve_or_die(a).host_blocks, 0u);
}

}  // namespace
}  // namespace kvs
