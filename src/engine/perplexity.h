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

// The number of whole windows of `ctx` tokens in `tokens`, or why `engine` cannot score them.
[[nodiscard]] Result<uint32_t> count_windows(const Engine& engine, size_t tokens, uint32_t ctx);

// Runs windows [begin, end) of `tokens` (window w: tokens [w * ctx, (w + 1) * ctx), its first
// token replaced by `bos` when set) through `engine` as scoring requests, as many at once as the
// pool holds whole. `started(w, id)` when window w is submitted; `finished(w, seq)` in window
// order, before its sequence is released. The windows must fit (count_windows).
[[nodiscard]] Status score_windows(Engine& engine, std::span<const int32_t> tokens, uint32_t ctx,
                                   std::optional<int32_t> bos, uint32_t begin, uint32_t end,
                                   const std::function<void(uint32_t, SeqId)>& started,
                                   const std::function<void(uint32_t, const Sequence&)>& finished);

// progress(window_done, windows_total, running_ppl) is called after each window. `bos`: the
// token each window starts with (nullopt: windows are plain slices of `tokens`).
[[nodiscard]] Result<PerplexityResult> compute_perplexity(
    Engine& engine, std::span<const int32_t> tokens, uint32_t ctx, std::optional<int32_t> bos,
    const std::function<void(uint32_t, uint32_t, double)>& progress = {});

}  // namespace kvs
