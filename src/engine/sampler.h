// Sampler: turns one row of logits into a token. A temperature below kGreedyTemperature (as in
// vLLM) is greedy (argmax, lowest id on ties): dividing logits by a tiny temperature overflows to
// infinity and would turn the weights into NaN. Otherwise softmax(logits / T) restricted by top-k
// then top-p, drawn from a per-sequence generator seeded by the request, so the same seed gives the
// same text.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/status.h"

namespace kvs {

// Temperatures below this sample greedily.
inline constexpr float kGreedyTemperature = 1e-5f;

struct SamplingParams {
  float temperature = 0.0f;  // < kGreedyTemperature = greedy
  int32_t top_k = 0;         // 0 = whole vocabulary
  float top_p = 1.0f;        // (0, 1]
  std::optional<uint64_t> seed;

  // Rejects out-of-range values with a message naming the field.
  [[nodiscard]] Status validate() const;
};

class Sampler {
 public:
  // With no seed, draws a seed from std::random_device.
  explicit Sampler(const SamplingParams& params);
  [[nodiscard]] int32_t sample(const float* logits, int32_t vocab_size);
  [[nodiscard]] uint64_t seed() const { return seed_; }

 private:
  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

[[nodiscard]] int32_t argmax(const float* logits, int32_t n);

}  // namespace kvs
