#include "engine/token_logprobs.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace kvs {

SampledLogprobs sampled_logprobs(const float* logits, int32_t vocab, int32_t token, uint32_t top) {
  KVS_CHECK(vocab > 0 && token >= 0 && token < vocab);
  float m = logits[0];
  for (int32_t v = 1; v < vocab; ++v) m = std::max(m, logits[v]);
  double sum = 0;
  for (int32_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - m);
  const double log_z = static_cast<double>(m) + std::log(sum);
  const auto logprob = [&](int32_t v) {
    return static_cast<float>(static_cast<double>(logits[v]) - log_z);
  };
  SampledLogprobs out;
  out.sampled = {token, logprob(token)};
  const auto k = static_cast<int32_t>(std::min<uint32_t>(top, static_cast<uint32_t>(vocab)));
  if (k == 0) return out;
  thread_local std::vector<int32_t> ids;  // the vocabulary's ids, reused token after token
  ids.resize(static_cast<size_t>(vocab));
  for (int32_t v = 0; v < vocab; ++v) ids[v] = v;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(k);
  for (int32_t i = 0; i < k; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

}  // namespace kvs
