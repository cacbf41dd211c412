#include "sim/trace_generator.h"

#include <algorithm>
#include <random>

namespace kvs {

Trace generate_trace(const TraceGeneratorConfig& c) {
  KVS_CHECK_MSG(c.block_tokens > 0 && c.conversations > 0 && c.min_new_tokens > 0 &&
                    c.min_new_tokens <= c.max_new_tokens &&
                    c.min_output_tokens <= c.max_output_tokens && c.min_output_tokens > 0 &&
                    c.rate_per_s > 0,
                "generate_trace: inconsistent config");
  std::mt19937_64 rng(c.seed);
  std::exponential_distribution<double> gap(c.rate_per_s);
  std::uniform_int_distribution<uint32_t> new_tokens(c.min_new_tokens, c.max_new_tokens);
  std::uniform_int_distribution<uint32_t> output(c.min_output_tokens, c.max_output_tokens);
  std::uniform_int_distribution<uint32_t> pick(0, c.conversations - 1);
  std::uniform_real_distribution<double> unit(0, 1);

  uint64_t next_id = 0;
  std::vector<uint64_t> system;
  for (uint32_t i = 0; i < c.system_prompt_blocks; ++i) system.push_back(next_id++);
  // A conversation's previous prompt: its hash ids and length.
  struct Conversation {
    std::vector<uint64_t> ids;
    uint32_t tokens = 0;
  };
  std::vector<Conversation> conv(c.conversations);

  Trace t;
  t.block_tokens = c.block_tokens;
  t.source = "generated (seed " + std::to_string(c.seed) + ")";
  double now = 0;
  for (uint32_t i = 0; i < c.requests; ++i) {
    TraceRequest r;
    r.arrival_s = now;
    now += gap(rng);
    r.output_tokens = output(rng);
    if (!t.requests.empty() && unit(rng) < c.repeat_fraction) {
      // A retry: the same prompt as an earlier request.
      std::uniform_int_distribution<size_t> earlier(0, t.requests.size() - 1);
      const TraceRequest& e = t.requests[earlier(rng)];
      r.input_tokens = e.input_tokens;
      r.hash_ids = e.hash_ids;
      t.requests.push_back(std::move(r));
      continue;
    }
    Conversation& cv = conv[pick(rng)];
    const uint32_t full = cv.tokens / c.block_tokens;  // the previous prompt's full blocks
    uint32_t keep = full * c.block_tokens;
    std::vector<uint64_t> ids(cv.ids.begin(), cv.ids.begin() + full);
    const uint32_t add = new_tokens(rng);
    if (cv.tokens == 0 || keep + add > c.max_prompt_tokens) {
      ids = system;  // a new conversation: the system prompt, then its own blocks
      keep = c.system_prompt_blocks * c.block_tokens;
    }
    r.input_tokens = keep + add;
    while (ids.size() * uint64_t{c.block_tokens} < r.input_tokens) ids.push_back(next_id++);
    r.hash_ids = ids;
    cv.ids = std::move(ids);
    cv.tokens = r.input_tokens;
    t.requests.push_back(std::move(r));
  }
  return t;
}

}  // namespace kvs
