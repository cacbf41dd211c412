// Perplexity over a token stream, in independent windows of `ctx` tokens (llama.cpp's
// method, so the numbers compare): each window is prefilled through the paged KV cache and the
// second half of its positions is scored (position i predicts token i + 1), so every scored
// token has at least ctx/2 tokens of context. When the model's tokenizer adds a BOS token, each
// window's first token is replaced by it, as llama.cpp's perplexity does (a window then starts
// the way every training sequence did; Gemma 3's perplexity is ~55% higher without it). That
// token is in the unscored half.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "core/status.h"
#include "engine/engine.h"

namespace kvs {

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;
  uint64_t scored_tokens = 0;
  uint32_t windows = 0;
  double seconds = 0;
};

// progress(window_done, windows_total, running_ppl) is called after each window. `bos`: the
// token each window starts with (nullopt: windows are plain slices of `tokens`).
[[nodiscard]] Result<PerplexityResult> compute_perplexity(
    Engine& engine, std::span<const int32_t> tokens, uint32_t ctx, std::optional<int32_t> bos,
    const std::function<void(uint32_t, uint32_t, double)>& progress = {});

}  // namespace kvs
