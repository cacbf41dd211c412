// Sampler: turns one row of logits into a token. A temperature below kGreedyTemperature (as in
// vLLM) is greedy (argmax, lowest id on ties): dividing logits by a tiny temperature overflows to
// infinity and would turn the weights into NaN. Otherwise softmax(logits / T) restricted by top-k
// then top-p, drawn from a per-sequence generator seeded by the request, so the same seed gives the
// same text.
//
// Penalties, as vLLM and the OpenAI API define them, change the logits before any of that (a
// copy: the model's logits stay as they are):
//   repetition_penalty r (1 = off): a token seen in the prompt or the output so far has its logit
//     divided by r when positive, multiplied by r when not (CTRL's rule, as vLLM applies it);
//   frequency_penalty f: minus f x (times the token occurs in the output so far);
//   presence_penalty p: minus p if the token occurs in the output so far at all;
//   min_tokens m: the end-of-generation tokens are impossible until m tokens were generated.
// They read only the sequence's own tokens, so a preempted and recomputed sequence, or a forked
// sample, gets exactly the penalties it would have had otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvs {

// Temperatures below this sample greedily.
inline constexpr float kGreedyTemperature = 1e-5f;
// The most top alternatives one sampled token may report.
inline constexpr uint32_t kMaxLogprobs = 1024;

struct SamplingParams {
  float temperature = 0.0f;  // < kGreedyTemperature = greedy
  int32_t top_k = 0;         // 0 = whole vocabulary
  float top_p = 1.0f;        // (0, 1]
  std::optional<uint64_t> seed;
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // (0, 2]
  uint32_t min_tokens = 0;
  // Set: report each sampled token's logprob and this many most likely alternatives
  // (token_logprobs.h). The server bounds it (--max-logprobs); the engine takes at most
  // kMaxLogprobs.
  std::optional<uint32_t> logprobs;

  // Rejects out-of-range values with a message naming the field.
  [[nodiscard]] Status validate() const;
  [[nodiscard]] bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// What the penalties look at: the sequence's prompt, its output so far, and the tokens that end
// generation (masked while fewer than min_tokens were generated).
struct SamplingContext {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
  std::span<const int32_t> eog_ids;
};

class Sampler {
 public:
  // With no seed, draws a seed from std::random_device.
  explicit Sampler(const SamplingParams& params);
  [[nodiscard]] int32_t sample(const float* logits, int32_t vocab_size);
  // With penalties and min_tokens applied from the context (see above).
  [[nodiscard]] int32_t sample(const float* logits, int32_t vocab_size,
                               const SamplingContext& context);
  [[nodiscard]] uint64_t seed() const { return seed_; }

 private:
  // Draws from the first total_of candidates (candidates_[0, sorted) already in order, the rest
  // ordered as far as top-p needs), weights exp((logit - max_logit) * inv_t).
  [[nodiscard]] int32_t draw_nucleus(int32_t sorted, float inv_t, float max_logit,
                                     int32_t total_of);

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<float> weights_;   // softmax weights in id order (no top-k / top-p)
  std::vector<float> adjusted_;  // the penalized copy of the logits
};

// The penalties and the min_tokens mask of `params` applied to logits[0, vocab_size) in place.
void apply_penalties(const SamplingParams& params, const SamplingContext& context, float* logits,
                     int32_t vocab_size);

}  // namespace kvs
