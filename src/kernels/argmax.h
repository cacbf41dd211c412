// Greedy decoding's choice: the lowest id of the largest logit. NaN logits are never chosen; a
// row of -inf gives the first -inf, a row with no comparable logit (all NaN) gives 0. Vectorized
// (Highway, every target): one pass for the largest value, one for its first position. It runs
// once per sequence per step, over the whole vocabulary (49K to 262K logits).
#pragma once

#include <cstdint>

namespace kvs {

[[nodiscard]] int32_t argmax(const float* logits, int32_t n);

}  // namespace kvs
