#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "kernels/argmax.h"

namespace kvs {
namespace {

// Candidates by logit, largest first, the lower id first among equals (a strict order: NaN
// logits are turned into -inf before).
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature) || temperature > 100.0f)
    return invalid_argument("temperature must be between 0 and 100, got " +
                            std::to_string(temperature));
  if (top_k < 0)
    return invalid_argument("top_k must be >= 0 (0 = no limit), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return invalid_argument("presence_penalty must be between -2 and 2, got " +
                            std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return invalid_argument("frequency_penalty must be between -2 and 2, got " +
                            std::to_string(frequency_penalty));
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 2.0f))
    return invalid_argument("repetition_penalty must be in (0, 2], got " +
                            std::to_string(repetition_penalty));
  if (logprobs && *logprobs > kMaxLogprobs)
    return invalid_argument("logprobs must be at most " + std::to_string(kMaxLogprobs) + ", got " +
                            std::to_string(*logprobs));
  return Status::ok();
}

void apply_penalties(const SamplingParams& p, const SamplingContext& c, float* logits, int32_t n) {
  if (p.has_penalties()) {
    std::unordered_map<int32_t, uint32_t> counts;  // in the output
    for (int32_t t : c.output)
      if (t >= 0 && t < n) ++counts[t];
    if (p.repetition_penalty != 1.0f) {
      std::unordered_set<int32_t> seen;
      for (int32_t t : c.prompt)
        if (t >= 0 && t < n) seen.insert(t);
      for (const auto& [t, k] : counts) seen.insert(t);
      for (int32_t t : seen) {
        float& l = logits[t];
        l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      }
    }
    for (const auto& [t, k] : counts)
      logits[t] -= p.frequency_penalty * static_cast<float>(k) + p.presence_penalty;
  }
  if (c.output.size() < p.min_tokens) {
    for (int32_t t : c.eog_ids)
      if (t >= 0 && t < n) logits[t] = -std::numeric_limits<float>::infinity();
  }
}

int32_t Sampler::sample(const float* logits, int32_t n, const SamplingContext& context) {
  if (!params_.has_penalties() && context.output.size() >= params_.min_tokens)
    return sample(logits, n);
  adjusted_.assign(logits, logits + n);
  apply_penalties(params_, context, adjusted_.data(), n);
  return sample(adjusted_.data(), n);
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : std::random_device{}()), rng_(seed_) {}

int32_t Sampler::sample(const float* logits, int32_t n) {
  if (params_.temperature < kGreedyTemperature || params_.top_k == 1) return argmax(logits, n);
  const float inv_t = 1.0f / params_.temperature;
  if ((params_.top_k <= 0 || params_.top_k >= n) && params_.top_p >= 1.0f) {
    // Every token is a candidate (the OpenAI default: temperature only): draw from the softmax
    // in id order, with no sort. Sorting the whole vocabulary cost 26 ms per token on Gemma 3's
    // 262K (more than its decode step). The distribution is the same; which token a given seed
    // draws is not the sorted walk's.
    const int32_t best = argmax(logits, n);
    const float max_logit = logits[best];
    if (!std::isfinite(max_logit)) return best;  // no finite weights to draw from
    weights_.resize(n);
    double total = 0;
    constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n; ++i) {
      // A NaN logit gets no weight (its exp would poison the total); -inf gets 0 anyway.
      weights_[i] = logits[i] > kMinusInf ? std::exp((logits[i] - max_logit) * inv_t) : 0.0f;
      total += weights_[i];
    }
    std::uniform_real_distribution<double> uni(0.0, total);
    double r = uni(rng_);
    int32_t last = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (weights_[i] <= 0) continue;
      last = i;
      r -= weights_[i];
      if (r <= 0) return i;
    }
    return last;
  }
  candidates_.resize(n);
  // A NaN logit is a candidate of no weight (-inf), so that the order below is a strict one.
  for (int32_t i = 0; i < n; ++i)
    candidates_[i] = {std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i],
                      i};
  if (params_.top_k > 0 && params_.top_k < n) {
    const int32_t keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
    if (!std::isfinite(candidates_[0].first)) return candidates_[0].second;
    return draw_nucleus(keep, inv_t, candidates_[0].first, /*total_of=*/keep);
  }
  // top-p over the whole vocabulary: only the nucleus needs to be in order. The candidates are
  // ordered a prefix at a time (nth_element, then a sort of the new part), growing 8x, until the
  // ordered prefix holds top_p of the mass; sorting all of Gemma 3's 262K logits cost 26 ms a
  // token. The nucleus and the draw are those of a full sort.
  const int32_t best = argmax(logits, n);
  if (!std::isfinite(logits[best])) return best;  // no finite weights to draw from
  return draw_nucleus(0, inv_t, logits[best], n);
}

int32_t Sampler::draw_nucleus(int32_t sorted, float inv_t, float max_logit, int32_t total_of) {
  const int32_t n = static_cast<int32_t>(candidates_.size());
  auto weight = [&](float logit) { return std::exp((logit - max_logit) * inv_t); };
  // The normalizer: every candidate (top-p alone) or the top-k.
  double total = 0;
  for (int32_t i = 0; i < total_of; ++i) total += weight(candidates_[i].first);
  int32_t keep = total_of;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    int32_t cut = 0;
    for (int32_t i = 0; i < keep && cut == 0; ++i) {
      if (i == sorted) {  // order the next part of the candidates
        const int32_t end = std::min<int32_t>(n, std::max<int32_t>(64, sorted * 8));
        if (end < n)
          std::nth_element(candidates_.begin() + sorted, candidates_.begin() + end,
                           candidates_.end(), by_logit);
        std::sort(candidates_.begin() + sorted, candidates_.begin() + end, by_logit);
        sorted = end;
      }
      cum += weight(candidates_[i].first) / total;
      if (cum >= params_.top_p) cut = i + 1;
    }
    if (cut == 0) cut = keep;
    keep = cut;
  } else if (sorted < keep) {
    std::sort(candidates_.begin() + sorted, candidates_.begin() + keep, by_logit);
  }
  double kept = 0;
  for (int32_t i = 0; i < keep; ++i) kept += candidates_[i].first = weight(candidates_[i].first);
  total = kept;
  std::uniform_real_distribution<double> uni(0.0, total);
  double r = uni(rng_);
  for (int32_t i = 0; i < keep; ++i) {
    r -= candidates_[i].first;
    if (r <= 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace kvs
