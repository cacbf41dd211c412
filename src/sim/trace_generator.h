// trace_generator: small synthetic traces in the Mooncake shape, for tests and examples. Requests
// belong to conversations; every prompt starts with a shared system prompt; a conversation's next
// turn repeats its previous prompt's full blocks and appends new tokens (so its first blocks are
// prefix hits), a fraction of requests repeat an earlier prompt exactly (retries), and arrivals are
// Poisson. Deterministic for a seed.
#pragma once

#include <cstdint>

#include "sim/trace.h"

namespace kvs {

struct TraceGeneratorConfig {
  uint32_t requests = 200;
  double rate_per_s = 2.0;  // mean arrivals per second (Poisson)
  uint32_t block_tokens = 512;
  uint32_t system_prompt_blocks = 1;  // full blocks every prompt starts with
  uint32_t conversations = 16;        // a request continues one of these, chosen at random
  uint32_t min_new_tokens = 64;       // prompt tokens a turn adds
  uint32_t max_new_tokens = 1500;
  uint32_t max_prompt_tokens = 16384;  // a conversation that would exceed this starts over
  uint32_t min_output_tokens = 1;
  uint32_t max_output_tokens = 400;
  double repeat_fraction = 0.05;  // requests that repeat an earlier prompt exactly
  uint64_t seed = 1;
};

[[nodiscard]] Trace generate_trace(const TraceGeneratorConfig& config);

}  // namespace kvs
