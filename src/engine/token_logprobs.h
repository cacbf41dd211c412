// TokenLogprobs: the log-probabilities a client asks for with `logprobs` / `top_logprobs`
// (OpenAI, vLLM): for each sampled token, its log-probability and the `top` most likely tokens'.
//
// They are taken from the model's raw logits, log_softmax(logits), before penalties, temperature,
// top-k and top-p: the distribution of the model itself, as vLLM reports by default
// (logprobs_mode "raw_logprobs"). The sum runs in double over the whole vocabulary, shifted by the
// maximum. The top list is ordered by logprob, the lower id first on ties, so it is deterministic.
#pragma once

#include <cstdint>
#include <vector>

namespace kvs {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampledLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top;  // min(top, vocab) entries, most likely first
};

// The sampled token's logprob and the `top` most likely tokens of logits[0, vocab).
[[nodiscard]] SampledLogprobs sampled_logprobs(const float* logits, int32_t vocab, int32_t token,
                                               uint32_t top);

}  // namespace kvs
