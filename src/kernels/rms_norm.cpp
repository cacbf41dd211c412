#include "kernels/rms_norm.h"

#include <cmath>

namespace kvs {

void rms_norm_reference(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  rms_norm_reference(x, weight, n, eps, out);
}

void rms_norm_rows(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                   float* out) {
  for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * n, weight, n, eps, out + r * n);
}

}  // namespace kvs
