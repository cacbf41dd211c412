#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <utility>

namespace kvs {

Result<uint32_t> count_windows(const Engine& engine, size_t tokens, uint32_t ctx) {
  if (ctx < 4) return invalid_argument("--ctx must be at least 4");
  if (ctx > engine.kv_pool().num_tokens)
    return invalid_argument("--ctx " + std::to_string(ctx) + " does not fit the KV pool of " +
                            std::to_string(engine.kv_pool().num_tokens) + " tokens");
  if (ctx > engine.max_model_len())
    return invalid_argument("--ctx " + std::to_string(ctx) + " is longer than the model's " +
                            std::to_string(engine.max_model_len()) + " tokens");
  const auto windows = static_cast<uint32_t>(tokens / ctx);
  if (windows == 0)
    return invalid_argument("the text has " + std::to_string(tokens) +
                            " tokens, fewer than one window of --ctx " + std::to_string(ctx));
  return windows;
}

Status score_windows(Engine& engine, std::span<const int32_t> tokens, uint32_t ctx,
                     std::optional<int32_t> bos, uint32_t begin, uint32_t end,
                     const std::function<void(uint32_t, SeqId)>& started,
                     const std::function<void(uint32_t, const Sequence&)>& finished) {
  // Windows are ordinary engine requests that score their second half instead of generating;
  // as many run at once as the pool holds whole (a token's logits do not depend on what else is
  // in its batch, so the result does not either).
  const uint32_t in_flight = static_cast<uint32_t>(std::max<uint64_t>(
      1, std::min<uint64_t>(engine.config().max_num_seqs, engine.kv_pool().num_tokens / ctx)));
  std::deque<std::pair<uint32_t, SeqId>> running;  // (window, id) in window order
  uint32_t submitted = begin;
  while (submitted < end || !running.empty()) {
    while (submitted < end && running.size() < in_flight) {
      SequenceRequest req{
          .prompt = std::vector<int32_t>(tokens.begin() + uint64_t{submitted} * ctx,
                                         tokens.begin() + uint64_t{submitted + 1} * ctx),
          .max_tokens = 0,
          .score_from = ctx / 2};
      if (bos) req.prompt[0] = *bos;
      KVS_ASSIGN_OR_RETURN(SeqId id, engine.add_request(std::move(req)));
      running.emplace_back(submitted, id);
      if (started) started(submitted, id);
      ++submitted;
    }
    (void)engine.step();
    // Windows finish in order of submission or out of it; report them in order.
    while (!running.empty() &&
           engine.sequence(running.front().second).status == SeqStatus::kFinished) {
      const auto [w, id] = running.front();
      if (finished) finished(w, engine.sequence(id));
      engine.release(id);
      running.pop_front();
    }
  }
  return Status::ok();
}

Result<PerplexityResult> compute_perplexity(
    Engine& engine, std::span<const int32_t> tokens, uint32_t ctx, std::optional<int32_t> bos,
    const std::function<void(uint32_t, uint32_t, double)>& progress) {
  KVS_ASSIGN_OR_RETURN(const uint32_t windows, count_windows(engine, tokens.size(), ctx));
  PerplexityResult r;
  const auto t0 = Clock::now();
  double nll_sum = 0;
  KVS_RETURN_IF_ERROR(
      score_windows(engine, tokens, ctx, bos, 0, windows, {}, [&](uint32_t, const Sequence& s) {
        nll_sum += s.prompt_nll;
        r.scored_tokens += s.prompt_scored;
        ++r.windows;
        if (progress) progress(r.windows, windows, std::exp(nll_sum / r.scored_tokens));
      }));
  r.mean_nll = nll_sum / r.scored_tokens;
  r.perplexity = std::exp(r.mean_nll);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace kvs
