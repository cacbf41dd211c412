#include "engine/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"

namespace kvs {
namespace {

// log_softmax(row) into out, max-shifted with the sum in double; both engines' rows go through
// it, so equal logits give equal log-probabilities and a divergence of exactly zero. Returns
// the most likely token (the lower id on ties).
int32_t log_softmax(const float* row, int64_t vocab, float* out) {
  int64_t top = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (row[v] > row[top]) top = v;
  const float m = row[top];
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - m));
  const double lse = std::log(sum);
  for (int64_t v = 0; v < vocab; ++v)
    out[v] = static_cast<float>(static_cast<double>(row[v] - m) - lse);
  return static_cast<int32_t>(top);
}

// The windows of one group: per window, its scored positions' reference log-probabilities and
// most likely tokens.
struct ReferenceRows {
  uint32_t first_window = 0;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<int32_t>> top;
};

double quantile(std::vector<double>& v, double q) {
  const auto k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

Result<KlDivergenceResult> compute_kl_divergence(
    Engine& reference, Engine& test, std::span<const int32_t> tokens, uint32_t ctx,
    std::optional<int32_t> bos, const std::function<void(uint32_t, uint32_t, double)>& progress,
    uint64_t reference_bytes) {
  const int64_t vocab = reference.model().spec().vocab_size;
  if (test.model().spec().vocab_size != static_cast<uint32_t>(vocab))
    return invalid_argument("the two engines' models have different vocabularies");
  KVS_ASSIGN_OR_RETURN(const uint32_t windows, count_windows(test, tokens.size(), ctx));
  if (Result<uint32_t> fits = count_windows(reference, tokens.size(), ctx); !fits.is_ok())
    return invalid_argument("the reference engine: " + fits.status().message());
  // Positions [ctx / 2, ctx - 1) of a window are scored (perplexity.h).
  const uint32_t rows = ctx - 1 - ctx / 2;
  const uint64_t window_bytes = uint64_t{rows} * static_cast<uint64_t>(vocab) * sizeof(float);
  const auto group = static_cast<uint32_t>(
      std::clamp<uint64_t>(reference_bytes / window_bytes, 1, uint64_t{windows}));

  KlDivergenceResult r;
  const auto t0 = Clock::now();
  std::vector<double> kl;  // per scored position, in window order
  kl.reserve(uint64_t{windows} * rows);
  double kl_sum = 0, ref_nll = 0, test_nll = 0;
  uint64_t same_top = 0;
  ReferenceRows ref;
  std::unordered_map<SeqId, uint32_t> window_of;  // the running engine's sequences
  const auto started = [&](uint32_t w, SeqId id) { window_of[id] = w; };
  // A scored sequence's window, as its index in the group (score_windows submitted it).
  const auto slot_of = [&](const Sequence& s) {
    const auto it = window_of.find(s.id);
    KVS_CHECK_MSG(it != window_of.end(), "a scored sequence that score_windows did not submit");
    return it->second - ref.first_window;
  };
  std::vector<float> test_lp(static_cast<size_t>(vocab));
  std::vector<std::vector<double>> window_kl;  // per window of the group, by position

  reference.set_score_observer(
      [&](const Sequence& s, uint32_t first, uint32_t count, const float* logits, int64_t) {
        const uint32_t slot = slot_of(s);
        for (uint32_t i = 0; i < count; ++i) {
          const uint32_t row = first + i - ctx / 2;
          ref.top[slot][row] = log_softmax(logits + int64_t{i} * vocab, vocab,
                                           ref.logprobs[slot].data() + int64_t{row} * vocab);
        }
      });
  test.set_score_observer(
      [&](const Sequence& s, uint32_t first, uint32_t count, const float* logits, int64_t) {
        const uint32_t slot = slot_of(s);
        for (uint32_t i = 0; i < count; ++i) {
          const uint32_t row = first + i - ctx / 2;
          const float* p = ref.logprobs[slot].data() + int64_t{row} * vocab;
          const int32_t top = log_softmax(logits + int64_t{i} * vocab, vocab, test_lp.data());
          double d = 0;
          for (int64_t v = 0; v < vocab; ++v)
            d += std::exp(static_cast<double>(p[v])) *
                 (static_cast<double>(p[v]) - static_cast<double>(test_lp[v]));
          window_kl[slot][row] = d;
          if (top == ref.top[slot][row]) ++same_top;
        }
      });
  struct ClearObservers {
    Engine& a;
    Engine& b;
    ~ClearObservers() {
      a.set_score_observer({});
      b.set_score_observer({});
    }
  } clear{reference, test};

  for (uint32_t g = 0; g < windows; g += group) {
    const uint32_t end = std::min(windows, g + group);
    ref.first_window = g;
    ref.logprobs.assign(end - g, std::vector<float>(uint64_t{rows} * static_cast<uint64_t>(vocab)));
    ref.top.assign(end - g, std::vector<int32_t>(rows));
    window_kl.assign(end - g, std::vector<double>(rows));
    window_of.clear();
    KVS_RETURN_IF_ERROR(score_windows(reference, tokens, ctx, bos, g, end, started,
                                      [&](uint32_t, const Sequence& s) {
                                        ref_nll += s.prompt_nll;
                                        r.reference.scored_tokens += s.prompt_scored;
                                        ++r.reference.windows;
                                      }));
    window_of.clear();
    KVS_RETURN_IF_ERROR(
        score_windows(test, tokens, ctx, bos, g, end, started, [&](uint32_t w, const Sequence& s) {
          test_nll += s.prompt_nll;
          r.test.scored_tokens += s.prompt_scored;
          ++r.test.windows;
          const std::vector<double>& done = window_kl[w - g];
          for (double d : done) kl_sum += d;
          kl.insert(kl.end(), done.begin(), done.end());
          if (progress) progress(r.test.windows, windows, kl_sum / static_cast<double>(kl.size()));
        }));
  }

  const auto n = static_cast<double>(kl.size());
  r.scored_tokens = kl.size();
  r.mean = kl_sum / n;
  double sq = 0;
  for (double d : kl) sq += (d - r.mean) * (d - r.mean);
  r.mean_stderr = kl.size() > 1 ? std::sqrt(sq / (n - 1) / n) : 0;
  r.same_top = static_cast<double>(same_top) / n;
  r.max = *std::max_element(kl.begin(), kl.end());
  r.p99 = quantile(kl, 0.99);
  r.median = quantile(kl, 0.5);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (PerplexityResult* p : {&r.reference, &r.test}) p->seconds = r.seconds;
  r.reference.mean_nll = ref_nll / static_cast<double>(r.reference.scored_tokens);
  r.test.mean_nll = test_nll / static_cast<double>(r.test.scored_tokens);
  r.reference.perplexity = std::exp(r.reference.mean_nll);
  r.test.perplexity = std::exp(r.test.mean_nll);
  return r;
}

}  // namespace kvs
