// Element-wise activations used by the forward pass. All buffers are [n] f32, no alignment
// needed; `out` may alias an input.
#pragma once

#include <cstdint>

namespace kvs {

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).  Rel. error vs reference <= 1e-6
// (plus f32 rounding) for |g| < 80; saturates correctly (silu(-inf-ish) -> -0, silu(+big) -> g).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU, Gemma): gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi)
// (g + 0.044715 g^3))), torch's gelu(approximate="tanh"). Abs. error vs reference <= 2e-6 *
// (|g| + 1) * |up| (f32 tanh approximation).
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
// The gated FFN's activation: out = act(gate) * up, act being SiLU (SwiGLU) or gelu_tanh (GeGLU).
enum class GateActivation { kSilu, kGeluTanh };
void gated_activation(GateActivation act, const float* gate, const float* up, int64_t n,
                      float* out);
// x = softmax(x) (max-subtracted, so any finite input is safe). n >= 1.
void softmax_inplace(float* x, int64_t n);
// x[i] += y[i] (residual connection).
void add_inplace(float* x, const float* y, int64_t n);

// Scalar oracles (double internally).
void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul_reference(const float* gate, const float* up, int64_t n, float* out);
void softmax_inplace_reference(float* x, int64_t n);
void add_inplace_reference(float* x, const float* y, int64_t n);

}  // namespace kvs
