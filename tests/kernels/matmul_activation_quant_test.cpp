// The integer path must compute exactly sum_k w_k * xq_k, where xq is the activation rounded
// per 32-element block to int8 with d = amax / 127 (llama.cpp's Q8 activations): any other
// deviation is a bug, not "quantization noise". (An exact-sum min term once added 1.3% error on
// Q4_1 weights where rounding the whole product adds 0.3%.)
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/dequantize.h"
#include "kernels/matmul.h"

namespace kvs {
namespace {

std::vector<float> round_activations(const std::vector<float>& x) {
  std::vector<float> xq(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    for (size_t i = b; i < b + 32; ++i) xq[i] = d * std::nearbyint(x[i] * id);
  }
  return xq;
}

TEST(MatmulActivationQuantTest, IntegerPathEqualsReferenceOnRoundedActivations) {
  std::mt19937 rng(5);
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                          WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K}) {
    const int64_t rows = 48, cols = 512;
    const auto wb = test::random_weights(type, rows, cols, 1.0f, rng);
    const WeightMatrix w{type, wb.data(), rows, cols, weight_row_bytes(type, cols)};
    std::normal_distribution<float> nd(0.0f, 1.5f);
    for (int64_t T : {1, 3, 4, 6, 13}) {
      std::vector<float> x(T * cols);
      for (auto& v : x) v = nd(rng);
      const std::vector<float> xq = round_activations(x);
      ThreadPool pool(2);
      std::vector<float> y(T * rows), yref(T * rows), wrow(cols);
      matmul_reference(w, xq.data(), T, yref.data());
      test::for_each_matmul_path([&] {
        // HWY_SCALAR has no integer path (dequantize + f32 dot): matmul_test.cpp covers it.
        if (hwy::SupportedTargets() == HWY_SCALAR) return;
        matmul(w, x.data(), T, y.data(), pool);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < rows; ++n) {
            dequantize_row_reference(type, static_cast<const uint8_t*>(w.data) + n * w.row_bytes,
                                     wrow.data(), cols);
            double mag = 0;
            for (int64_t k = 0; k < cols; ++k) mag += std::fabs(double(wrow[k]) * xq[t * cols + k]);
            ASSERT_NEAR(y[t * rows + n], yref[t * rows + n], 3e-5 * mag + 1e-6)
                << weight_type_info(type).name << " T " << T << " t " << t << " n " << n;
          }
      });
    }
  }
}

}  // namespace
}  // namespace kvs
