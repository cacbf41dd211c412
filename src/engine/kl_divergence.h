// KL divergence between two engines' next-token distributions over the same windows: how far a
// KV format moves the model from a reference format (f32 or f16 KV), token by token. Perplexity
// averages the log-likelihood of the one token that came next, so a format's error shows in it
// only through that token, and at 8 bits it moves by hundredths of a percent, either way with
// the text. The KL divergence reads every token's probability at every scored position, so it
// measures small errors that perplexity cannot rank (llama.cpp's `--kl-divergence` reports the
// same statistics, from a file of the reference's logits).
//
// Both engines score the windows of compute_perplexity (the second half of each, BOS first). The
// reference's log-probabilities are kept for a group of windows at a time (at most about 1 GiB),
// then the test engine scores the same windows against them: two engines in one process, no
// logits file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/perplexity.h"

namespace kvs {

struct KlDivergenceResult {
  PerplexityResult reference;  // each engine's perplexity over the same windows
  PerplexityResult test;
  // KL(reference || test) per scored position, in nats: its mean, the mean's standard error,
  // and quantiles of the positions' values.
  double mean = 0;
  double mean_stderr = 0;
  double median = 0;
  double p99 = 0;
  double max = 0;
  // The share of scored positions where both engines' most likely token is the same one.
  double same_top = 0;
  uint64_t scored_tokens = 0;
  double seconds = 0;
};

// The reference's log-probabilities kept at once, by default: windows are grouped to stay under
// it (one window at least).
inline constexpr uint64_t kKlReferenceBytes = uint64_t{1} << 30;

// progress(window_done, windows_total, running_mean_kl) after each window of the test engine.
// Fails when the engines' vocabularies differ or a window does not fit either.
[[nodiscard]] Result<KlDivergenceResult> compute_kl_divergence(
    Engine& reference, Engine& test, std::span<const int32_t> tokens, uint32_t ctx,
    std::optional<int32_t> bos,
    const std::function<void(uint32_t, uint32_t, double)>& progress = {},
    uint64_t reference_bytes = kKlReferenceBytes);

}  // namespace kvs
