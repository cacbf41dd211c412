#include "kernels/activations.h"

#include <cmath>

namespace kvs {

void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void softmax_inplace_reference(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
}

void add_inplace_reference(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  silu_mul_reference(gate, up, n, out);
}
void softmax_inplace(float* x, int64_t n) { softmax_inplace_reference(x, n); }
void add_inplace(float* x, const float* y, int64_t n) { add_inplace_reference(x, y, n); }

}  // namespace kvs
