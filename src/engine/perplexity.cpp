#include "engine/perplexity.h"

#include <cmath>
#include <string>
#include <vector>

namespace kvs {

Result<PerplexityResult> compute_perplexity(
    Engine& engine, std::span<const int32_t> tokens, uint32_t ctx,
    const std::function<void(uint32_t, uint32_t, double)>& progress) {
  if (ctx < 4) return invalid_argument("--ctx must be at least 4");
  if (ctx > engine.pool_info().num_tokens)
    return invalid_argument("--ctx " + std::to_string(ctx) + " does not fit the KV pool of " +
                            std::to_string(engine.pool_info().num_tokens) + " tokens");
  const uint32_t windows = static_cast<uint32_t>(tokens.size() / ctx);
  if (windows == 0)
    return invalid_argument("the text has " + std::to_string(tokens.size()) +
                            " tokens, fewer than one window of --ctx " + std::to_string(ctx));
  KvCacheManager& cache = engine.cache();
  const uint32_t chunk = engine.config().max_num_batched_tokens;
  const int64_t vocab = engine.model().spec().vocab_size;
  const uint32_t first = ctx / 2;  // scored positions: [first, ctx - 1)
  PerplexityResult r;
  const auto t0 = Clock::now();
  double nll_sum = 0;
  std::vector<BlockCopy> copies;
  // A sequence id outside the engine's own range (the engine counts up from 1).
  const SeqId seq{~uint64_t{0}};
  for (uint32_t w = 0; w < windows; ++w) {
    std::span<const int32_t> win = tokens.subspan(uint64_t{w} * ctx, ctx);
    copies.clear();
    // Prefix caching off for scoring: each window must be computed, not reused.
    KVS_ASSIGN_OR_RETURN(uint32_t cached,
                         cache.admit(seq, win.first(1), "kvserve-perplexity", &copies));
    KVS_CHECK(cached == 0);
    uint32_t pos = 0;
    while (pos < ctx) {
      // Chunk boundaries fall on `first`, so chunks before it need no logits.
      uint32_t n = std::min(chunk, ctx - pos);
      if (pos < first) n = std::min(n, first - pos);
      KVS_RETURN_IF_ERROR(cache.append_slots(seq, n, &copies));
      const RunnerChunk rc{.seq = seq,
                           .tokens = win.subspan(pos, n),
                           .start_pos = pos,
                           .all_logits = pos >= first,
                           .last_logits = false};
      std::span<const float> logits = engine.runner().run(cache, {&rc, 1}, copies);
      copies.clear();
      cache.commit_tokens(seq, rc.tokens);
      if (rc.all_logits) {
        for (uint32_t i = 0; i < n; ++i) {
          const uint32_t p = pos + i;
          if (p + 1 >= ctx) break;
          const float* row = logits.data() + i * vocab;
          float m = row[0];
          for (int64_t v = 1; v < vocab; ++v) m = std::max(m, row[v]);
          double sum = 0;
          for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - m));
          nll_sum += -(static_cast<double>(row[win[p + 1]] - m) - std::log(sum));
          ++r.scored_tokens;
        }
      }
      pos += n;
    }
    cache.free(seq);
    ++r.windows;
    if (progress) progress(w + 1, windows, std::exp(nll_sum / r.scored_tokens));
  }
  r.mean_nll = nll_sum / r.scored_tokens;
  r.perplexity = std::exp(r.mean_nll);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace kvs
