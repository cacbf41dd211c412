// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight (llama-style, weight multiplies after).
#pragma once

#include <cstdint>

namespace kvs {

// x, weight, out: [n] f32 (out may alias x). Sum of squares accumulated in f32 lanes.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
// x, out: [rows][n]; weight: [n]. out may alias x.
void rms_norm_rows(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                   float* out);

// Scalar oracle (sum of squares in double).
void rms_norm_reference(const float* x, const float* weight, int64_t n, float eps, float* out);

}  // namespace kvs
