// Shared helpers of the simulator tests: the source tree's data folder (catalog, devices) and a
// setup for the catalog's Llama 3.1 8B on an H100 with a pool large enough for a whole trace.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "sim/sim_request.h"
#include "sim/trace.h"

namespace kvs::test {

inline void use_source_data_dir() {
  ::setenv("KVSERVE_DATA_DIR", KVSERVE_TEST_DATA_DIR "/../../data", 1);
}

// Llama 3.1 8B (catalog) on one H100 preset, bf16 KV.
inline SimArgs llama_h100_args() {
  SimArgs a;
  a.hw.model = "llama-3.1-8b";
  a.hw.gpu = "H100";
  return a;
}

// A pool holding every token of the trace at once (nothing is ever evicted or preempted).
inline std::string pool_for_whole_trace(const Trace& t, uint32_t block_size,
                                        uint64_t bytes_per_token = 131072) {
  uint64_t blocks = 0;
  for (const TraceRequest& r : t.requests)
    blocks += (uint64_t{r.input_tokens} + r.output_tokens + block_size - 1) / block_size + 1;
  return std::to_string(blocks * block_size * bytes_per_token);
}

inline SimSetup resolve_or_die(const SimArgs& a) {
  auto s = resolve_sim(a);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return std::move(s).value();
}

}  // namespace kvs::test
