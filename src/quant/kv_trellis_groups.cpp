#include "quant/kv_trellis_groups.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/half.h"
#include "quant/kv_codecs.h"
#include "quant/trellis_codebook.h"

namespace kvs {
namespace {

constexpr float kF16Max = 65504.0f;
constexpr float kF32Max = 3.4028235e38f;
constexpr float kMaxScaled = 1024.0f;  // x / d beyond any level: clamped so that costs stay finite
constexpr float kScaleFactors[] = {0.8f, 0.88f, 0.96f, 1.04f, 1.12f};
constexpr uint32_t kHalf = kTrellisGroup / 2;

// The first state of least cost: the least cost first, in eight independent minima (a chain of
// 256 compares was most of the writer's scalar time), then the first state that has it.
uint32_t first_least_state(const float* cost) {
  float m[8];
  for (uint32_t k = 0; k < 8; ++k) m[k] = cost[k];
  for (uint32_t s = 8; s < kTrellisStates; s += 8)
    for (uint32_t k = 0; k < 8; ++k) m[k] = cost[s + k] < m[k] ? cost[s + k] : m[k];
  float least = m[0];
  for (uint32_t k = 1; k < 8; ++k) least = m[k] < least ? m[k] : least;
  uint32_t st = 0;
  while (st + 1 < kTrellisStates && cost[st] != least) ++st;
  return st;
}

// The best path's states from element 63 down to element `stop`, given a finished forward pass:
// the cheapest end state allowed (with a context, one whose low six bits are it: the first of
// least cost), then back through the predecessors.
void trace_back(const float* cost, const uint64_t* back, int context, uint32_t stop,
                uint8_t* states) {
  uint32_t st = 0;
  if (context < 0) {
    st = first_least_state(cost);
  } else {  // the states context + 64 a
    st = static_cast<uint32_t>(context);
    float best = cost[st];
    for (uint32_t s = st + kTrellisContexts; s < kTrellisStates; s += kTrellisContexts)
      if (cost[s] < best) {
        best = cost[s];
        st = s;
      }
  }
  for (uint32_t i = kTrellisGroup - 1; i > stop; --i) {
    states[i] = static_cast<uint8_t>(st);
    const uint32_t t = st >> 2;
    st = t + kTrellisContexts * trellis_predecessor(back, i, t);
  }
  states[stop] = static_cast<uint8_t>(st);
}

// The tail-biting path for x (scaled): a free pass over x rotated by half, whose state at x's last
// element gives the context both ends of the second pass share.
void tail_biting_path(const float* x, TrellisForwardFn forward, uint8_t* states) {
  float rotated[kTrellisGroup];
  float cost[kTrellisStates];
  uint64_t back[kTrellisBackWords];
  for (uint32_t i = 0; i < kTrellisGroup; ++i) rotated[i] = x[(i + kHalf) % kTrellisGroup];
  forward(rotated, -1, cost, back);
  // Only the state at the wrap is read: the free path is traced back to it and no further.
  trace_back(cost, back, -1, kTrellisGroup - kHalf - 1, states);
  const int context = states[kTrellisGroup - kHalf - 1] & (kTrellisContexts - 1);
  forward(x, context, cost, back);
  trace_back(cost, back, context, 0, states);
}

}  // namespace

void trellis_forward_scalar(const float* x, int context, float* cost, uint64_t* back) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (uint32_t s = 0; s < kTrellisStates; ++s) {
    const float d = x[0] - float(kTrellisLevels[s]);
    cost[s] = context < 0 || (s >> 2) == static_cast<uint32_t>(context) ? d * d : kInf;
  }
  float m[kTrellisContexts];
  for (uint32_t i = 1; i < kTrellisGroup; ++i) {
    uint64_t* bk = back + 3 * i;
    bk[0] = bk[1] = bk[2] = 0;
    for (uint32_t t = 0; t < kTrellisContexts; ++t) {
      float best = cost[t];
      for (uint32_t a = 1; a < 4; ++a)
        if (cost[t + kTrellisContexts * a] < best) {
          best = cost[t + kTrellisContexts * a];
          bk[a - 1] |= uint64_t{1} << t;
        }
      m[t] = best;
    }
    for (uint32_t s = 0; s < kTrellisStates; ++s) {
      const float d = x[i] - float(kTrellisLevels[s]);
      cost[s] = m[s >> 2] + d * d;
    }
  }
}

uint32_t trellis_state(const uint8_t* group, uint32_t i) {
  const uint32_t bit = 2 * (kTrellisGroup - 1 - i);
  const uint8_t* plane = group + 2;
  const uint32_t lo = plane[bit / 8], hi = plane[(bit / 8 + 1) % 16];
  return ((lo | hi << 8) >> (bit % 8)) & 0xFFu;
}

void quantize_trellis(const float* x, uint32_t n, uint8_t* dst) {
  quantize_trellis_with(x, n, dst, trellis_forward_scalar);
}

void quantize_trellis_with(const float* xs, uint32_t n, uint8_t* dst, TrellisForwardFn forward) {
  KVS_CHECK(n % kTrellisGroup == 0);
  float x[kTrellisGroup], scaled[kTrellisGroup];
  uint8_t states[kTrellisGroup], best_states[kTrellisGroup];
  for (uint32_t g = 0; g < n / kTrellisGroup; ++g, xs += kTrellisGroup, dst += kTrellisGroupBytes) {
    double sum_sq = 0;
    for (uint32_t i = 0; i < kTrellisGroup; ++i) {
      x[i] = std::isnan(xs[i]) ? 0.0f : std::clamp(xs[i], -kF32Max, kF32Max);
      sum_sq += double(x[i]) * x[i];
    }
    const double rms = std::sqrt(sum_sq / kTrellisGroup);
    double best_err = std::numeric_limits<double>::infinity();
    float best_d = 0;
    std::memset(best_states, 0, sizeof best_states);
    for (const float f : kScaleFactors) {
      const float d = f16_to_f32(f32_to_f16(static_cast<float>(
          std::min(f * rms / (kTrellisLevelRms * kTrellisLevelUnit), double{kF16Max}))));
      if (!(d > 0)) continue;
      const float unit = d * kTrellisLevelUnit;  // exact: a power of two times an f16
      for (uint32_t i = 0; i < kTrellisGroup; ++i)
        scaled[i] = std::clamp(x[i] / unit, -kMaxScaled, kMaxScaled);
      tail_biting_path(scaled, forward, states);
      double err = 0;
      for (uint32_t i = 0; i < kTrellisGroup; ++i) {
        const double e = double(x[i]) - double(unit) * kTrellisLevels[states[i]];
        err += e * e;
      }
      if (err < best_err) {
        best_err = err;
        best_d = d;
        std::memcpy(best_states, states, sizeof states);
      }
    }
    const uint16_t h = f32_to_f16(best_d);
    std::memcpy(dst, &h, 2);
    uint8_t plane[16] = {};
    for (uint32_t i = 0; i < kTrellisGroup; ++i) {
      const uint32_t bit = 2 * (kTrellisGroup - 1 - i);
      plane[bit / 8] |= static_cast<uint8_t>((best_states[i] & 3u) << (bit % 8));
    }
    std::memcpy(dst + 2, plane, sizeof plane);
  }
}

void dequantize_trellis(const uint8_t* src, uint32_t n, float* y) {
  for (uint32_t g = 0; g < n / kTrellisGroup; ++g, src += kTrellisGroupBytes) {
    const float unit = load_f16_scale(src) * kTrellisLevelUnit;
    for (uint32_t i = 0; i < kTrellisGroup; ++i)
      *y++ = unit * float(kTrellisLevels[trellis_state(src, i)]);
  }
}

}  // namespace kvs
