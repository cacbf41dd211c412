// Trace: the requests `kvserve simulate` replays, in arrival order. Each request has an arrival
// time, a prompt length, an output length and, when the trace says how prompts share prefixes
// (Mooncake), the ids of its prompt's blocks: two requests whose first k ids are equal share their
// first k x block_tokens prompt tokens (the last block may be partial; a request with no ids
// shares nothing).
//
// Formats (trace_parsers.h): Mooncake JSONL (timestamp ms, input_length, output_length,
// hash_ids of 512-token blocks) and CSV (timestamp, prompt_tokens, output_tokens, as Azure's
// public LLM inference traces).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvs {

struct TraceRequest {
  double arrival_s = 0;  // seconds after the trace's first request
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
  std::vector<uint64_t> hash_ids;  // prompt blocks of Trace::block_tokens (may be empty)
};

struct Trace {
  std::vector<TraceRequest> requests;  // sorted by arrival (stable: ties keep file order)
  uint32_t block_tokens = 512;         // tokens per hash id
  std::string source;                  // the file, or "generated: ..."
  std::vector<std::string> notes;      // what the loader changed (e.g. zero outputs made 1)
};

// Checks the invariants every consumer relies on: arrivals finite, non-negative and sorted;
// input and output tokens >= 1; no more hash ids than ceil(input / block_tokens).
[[nodiscard]] Status validate_trace(const Trace& trace);

// Arrivals divided by `rate_scale` (2 = twice the request rate); > 0.
[[nodiscard]] Status scale_trace_rate(Trace& trace, double rate_scale);
// Delays every arrival by a uniform draw of [0, jitter_s) seconds from a generator seeded with
// `seed`, then sorts again by arrival (stable). jitter_s >= 0 and finite; 0 changes nothing.
[[nodiscard]] Status jitter_trace_arrivals(Trace& trace, double jitter_s, uint64_t seed);
// Keeps the first `max_requests` requests (0 = all).
void truncate_trace(Trace& trace, uint64_t max_requests);

struct TraceStats {
  uint64_t requests = 0;
  double duration_s = 0;  // last arrival
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  uint32_t max_input_tokens = 0;
  uint64_t max_total_tokens = 0;  // input + output (each may be up to 2^32 - 1)
  // Prompt tokens that repeat an earlier request's prompt prefix at hash-block granularity (the
  // trace's own reuse, Mooncake's "cache ratio"): per request, min(k x block_tokens, input) for
  // the longest run of leading ids k seen as a prefix before. 0 when the trace has no ids.
  uint64_t reused_tokens = 0;
  [[nodiscard]] double reuse_ratio() const {
    return input_tokens == 0 ? 0 : static_cast<double>(reused_tokens) / input_tokens;
  }
};
[[nodiscard]] TraceStats trace_stats(const Trace& trace);

}  // namespace kvs
