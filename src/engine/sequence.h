// Sequence: one stream of tokens the engine is generating (a request, or one of its n > 1
// samples). It owns its token list and sampler; its KV blocks belong to the cache manager,
// keyed by `id`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/token_logprobs.h"
#include "kvcache/kv_cache_manager.h"
#include "quant/recent_window.h"

namespace kvs {

enum class SeqStatus : uint8_t { kWaiting, kRunning, kFinished };
// kEos: an end-of-generation token; kStop: a stop string (the step driver's stop hook); kLength:
// max_tokens reached (or a scored prompt fully scored); kAbort: cancelled.
enum class FinishReason : uint8_t { kNone, kEos, kStop, kLength, kAbort };

[[nodiscard]] const char* finish_reason_name(FinishReason reason);

using Clock = std::chrono::steady_clock;

// The most samples (n) one request may ask for: the one limit the engine enforces and the server
// reports.
inline constexpr uint32_t kMaxSamplesPerRequest = 16;

struct SequenceRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  uint32_t max_tokens = 128;  // generated tokens at most
  std::string cache_salt;     // tenant namespace for prefix caching
  bool ignore_eos = false;
  // Scheduling priority, vLLM semantics: a LOWER number is MORE important. Admission is FCFS
  // within a priority; preemption victims are the least important, then the newest.
  int32_t priority = 0;
  // Samples of the prompt: after the prompt is prefilled, n - 1 children are forked (copy-on-
  // write, sharing every prompt block); child i samples with seed + i.
  uint32_t n = 1;
  // Scores the prompt instead of generating (perplexity): the engine adds
  // -log p(prompt[p + 1] | prompt[0..p]) for every p in [score_from, prompt length - 1) to
  // Sequence::prompt_nll. Needs max_tokens == 0 and n == 1.
  std::optional<uint32_t> score_from;
};

struct Sequence {
  SeqId id{0};
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  uint32_t prompt_len = 0;
  uint32_t num_computed = 0;   // tokens whose K/V are in the cache
  uint32_t cached_tokens = 0;  // prompt tokens reused from the prefix cache at admission
  uint32_t max_tokens = 0;
  std::string cache_salt;
  bool ignore_eos = false;
  int32_t priority = 0;
  uint64_t order = 0;          // FCFS position: the request's id (children share their parent's)
  SeqId parent{0};             // the request's first sequence, for a forked child; else 0
  uint32_t index = 0;          // sample index within the request (0 = the parent)
  uint32_t pending_forks = 0;  // children still to fork once the prompt is prefilled
  bool swapped = false;        // waiting with its KV in the host swap area
  // When this waiting sequence started "loading": its prefix is on disk or in Redis and being
  // read by the tier's loader thread (scheduler.h); unset while it is not waiting for one.
  Clock::time_point tier_wait_start{};
  std::optional<uint32_t> score_from;  // see SequenceRequest::score_from
  double prompt_nll = 0;               // sum of the scored positions' negative log-likelihoods
  uint32_t prompt_scored = 0;          // positions scored so far
  SamplingParams sampling;
  Sampler sampler;
  // The last sampled token's logprobs when sampling.logprobs asks for them (the backend sets
  // them, the step driver moves them into the token's StepOutput).
  std::optional<SampledLogprobs> last_logprobs;
  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  Clock::time_point arrival, first_scheduled, first_token, finished;

  Sequence(SeqId sid, SequenceRequest req)
      : id(sid),
        tokens(std::move(req.prompt)),
        prompt_len(static_cast<uint32_t>(tokens.size())),
        max_tokens(req.max_tokens),
        cache_salt(std::move(req.cache_salt)),
        ignore_eos(req.ignore_eos),
        priority(req.priority),
        order(sid.value),
        pending_forks(req.n > 1 ? req.n - 1 : 0),
        score_from(req.score_from),
        sampling(req.sampling),
        sampler(req.sampling),
        arrival(Clock::now()) {}

  [[nodiscard]] uint32_t num_generated() const {
    return static_cast<uint32_t>(tokens.size()) - prompt_len;
  }
  // Tokens whose K/V still have to be computed: the whole prompt at first (minus any cached
  // prefix), then one per decode step, or everything again after a recompute preemption.
  [[nodiscard]] uint32_t remaining() const {
    return static_cast<uint32_t>(tokens.size()) - num_computed;
  }
  uint32_t num_preemptions = 0;
};

// How many leading tokens of `s` the prefix cache may hand over: at most those before its scored
// positions, and with a recent-token window of `window` tokens at most its window floor
// (quant/recent_window.h), so that everything its windows read is computed by the sequence
// itself. The cache manager further keeps the last token (admit).
[[nodiscard]] inline uint32_t recent_window_floor(const Sequence& s, uint32_t window) {
  return RecentWindow::floor_of(s.score_from.value_or(s.prompt_len - 1), window);
}
[[nodiscard]] inline uint32_t max_cached_tokens(const Sequence& s, uint32_t window) {
  const uint32_t cap = s.score_from.value_or(UINT32_MAX);
  return window == 0 ? cap : std::min(cap, recent_window_floor(s, window));
}

// The positions of a chunk [start, start + n) of `s` whose logits the step needs:
// [first, first + count): the last position of a chunk that reaches the end of `s` (its next
// token is sampled), or the scored positions of a scored prompt.
struct LogitsPositions {
  uint32_t first = 0;
  uint32_t count = 0;
};
[[nodiscard]] inline LogitsPositions logits_positions(const Sequence& s, uint32_t start,
                                                      uint32_t n) {
  if (s.score_from) {
    // Position p predicts prompt token p + 1, so the last prompt position scores nothing.
    const uint32_t lo = std::max(start, *s.score_from);
    const uint32_t hi = std::min(start + n, s.prompt_len - 1);
    return hi > lo ? LogitsPositions{lo, hi - lo} : LogitsPositions{};
  }
  if (start + n == s.tokens.size()) return {start + n - 1, 1};
  return {};
}

}  // namespace kvs
