// Rotary position embedding, in place, on a [T][heads][head_dim] f32 buffer.
//
// Rotation of one pair (a, b) by theta: (a*cos - b*sin, a*sin + b*cos), with
// theta_i = pos * freq_base^(-2i/rot_dim) for pair i in [0, rot_dim/2).
//   kNormal (ggml mode 0, llama): pair i = (x[2i], x[2i+1]). Correct for llama-family GGUFs
//           because llama.cpp's converter permutes the Q/K weights to match this mode.
//   kNeox   (ggml mode 2, NeoX/Qwen/...): pair i = (x[i], x[i + rot_dim/2]).
// Elements at index >= rot_dim of each head are left untouched (partial rotary).
#pragma once

#include <cstdint>
#include <vector>

namespace kvs {

enum class RopeMode : uint8_t { kNormal, kNeox };

struct RopeConfig {
  int64_t head_dim = 0;  // elements per head
  int64_t rot_dim = 0;   // rotated elements per head, even, <= head_dim (usually == head_dim)
  float freq_base = 10000.0f;
  RopeMode mode = RopeMode::kNormal;
  bool operator==(const RopeConfig&) const = default;
};

// The cos/sin of a step's tokens under one RopeConfig, in double and rounded once (a position of
// 100k times a frequency near 1 loses too many bits in f32): computed once per step and applied
// to every layer that shares the config, the same floats rope_inplace computes per call.
class RopeAngles {
 public:
  void compute(const int32_t* positions, int64_t T, const RopeConfig& cfg);
  [[nodiscard]] const RopeConfig& config() const { return cfg_; }
  [[nodiscard]] int64_t tokens() const { return tokens_; }
  // Token t's factors: normal mode per element (c[2i] = c[2i+1] = cos, s[2i] = -sin,
  // s[2i+1] = sin, so that x' = x*c + swap_pairs(x)*s), NeoX mode per pair (c[i], s[i]).
  [[nodiscard]] const float* cos_row(int64_t t) const { return c_.data() + t * cfg_.rot_dim; }
  [[nodiscard]] const float* sin_row(int64_t t) const { return s_.data() + t * cfg_.rot_dim; }

 private:
  RopeConfig cfg_;
  int64_t tokens_ = 0;
  std::vector<float> c_, s_;
};

// rope_inplace_qk with angles computed before (angles.tokens() tokens, its config).
void rope_inplace_qk(float* q, int64_t q_heads, float* k, int64_t k_heads,
                     const RopeAngles& angles);
// The same for tokens [t0, t1) only (q and k still point at token 0), so that threads can take
// disjoint ranges: each token's bits are those of the whole call.
void rope_inplace_qk(float* q, int64_t q_heads, float* k, int64_t k_heads, const RopeAngles& angles,
                     int64_t t0, int64_t t1);

// x: [T][heads][head_dim]; positions: [T]. cos/sin are computed per call, once per (token, pair)
// and shared by all heads (angles in double, so large positions stay accurate); the pairs'
// frequencies once per call.
// Precondition: rot_dim <= 1024.
void rope_inplace(float* x, int64_t T, int64_t heads, const int32_t* positions,
                  const RopeConfig& cfg);

// rope_inplace of q [T][q_heads][head_dim] and k [T][k_heads][head_dim] at the same positions, with
// the same bits, computing each token's cos/sin once for both.
void rope_inplace_qk(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t T,
                     const int32_t* positions, const RopeConfig& cfg);

// Scalar oracle (everything in double).
void rope_inplace_reference(float* x, int64_t T, int64_t heads, const int32_t* positions,
                            const RopeConfig& cfg);

}  // namespace kvs
