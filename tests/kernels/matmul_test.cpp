#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dequantize.h"
#include "kernels/kernel_test_util.h"

namespace kvs {
namespace {

bool uses_int_path(WeightType t) {
  return t == WeightType::kQ8_0 || t == WeightType::kQ4_0 || t == WeightType::kQ4_1 ||
         t == WeightType::kQ5_0 || t == WeightType::kQ4_K || t == WeightType::kQ6_K;
}

// Per-output error bound of matmul() (see kernels/matmul.h): f32 rounding for every type plus,
// for the integer path, the activation quantization term sum_b amax_b * sum_{k in b} |w_k| / 254
// (the whole weight: the min term uses the quantized block sum, see kernels/matmul.h).
std::vector<double> error_bounds(const WeightMatrix& w, const float* x, int64_t T) {
  const int64_t K = w.cols, N = w.rows;
  std::vector<double> bound(static_cast<size_t>(T * N));
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    const auto* src = static_cast<const uint8_t*>(w.data) + n * w.row_bytes;
    dequantize_row_reference(w.type, src, row.data(), K);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * K;
      double abs_dot = 0, quant = 0;
      for (int64_t b = 0; b < K; b += 32) {
        double amax = 0, wsum = 0;
        for (int64_t k = b; k < std::min(b + 32, K); ++k) {
          abs_dot += std::fabs(static_cast<double>(row[k]) * xt[k]);
          amax = std::max(amax, static_cast<double>(std::fabs(xt[k])));
          wsum += std::fabs(row[k]);
        }
        quant += amax * wsum / 254.0;
      }
      double b = 3e-5 * abs_dot + 1e-30;
      if (uses_int_path(w.type)) b += 1.01 * quant;
      bound[t * N + n] = b;
    }
  }
  return bound;
}

void check_matmul(WeightType type, int64_t N, int64_t K, int64_t T, ThreadPool& pool, float wscale,
                  float xscale, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << weight_type_info(type).name << " N=" << N << " K=" << K
                                  << " T=" << T << " threads=" << pool.num_threads()
                                  << " wscale=" << wscale << " xscale=" << xscale);
  const auto wbuf = test::random_weights(type, N, K, wscale, rng);
  const WeightMatrix w{type, wbuf.data(), N, K, weight_row_bytes(type, K)};
  // Offset X and Y by one float so that no kernel can rely on alignment.
  auto xs = test::random_floats(T * K + 1, xscale, rng);
  const float* x = xs.data() + 1;
  std::vector<float> y_ref(T * N), y_buf(T * N + 1, NAN);
  float* y = y_buf.data() + 1;
  matmul_reference(w, x, T, y_ref.data());
  const auto bound = error_bounds(w, x, T);
  const auto run = [&] {
    std::fill(y_buf.begin(), y_buf.end(), NAN);
    matmul(w, x, T, y, pool);
    int failures = 0;
    for (int64_t i = 0; i < T * N && failures < 5; ++i) {
      if (!(std::fabs(static_cast<double>(y[i]) - y_ref[i]) <= bound[i])) {
        ADD_FAILURE() << "t=" << i / N << " n=" << i % N << " y=" << y[i] << " ref=" << y_ref[i]
                      << " bound=" << bound[i];
        ++failures;
      }
    }
    EXPECT_TRUE(std::isnan(y_buf[0])) << "wrote before y";
  };
  // Every path (8-bit GEMM ISAs, Highway targets) single-threaded; the work split is path
  // independent, so multi-threaded runs take the 8-bit ISAs and the best Highway target only
  // (keeps the test fast on oversubscribed CI machines).
  if (pool.num_threads() == 1) {
    test::for_each_matmul_path(run);
  } else {
    for (Int8Isa isa : kAllInt8Isas) {
      if (!int8_isa_supported(isa)) continue;
      set_int8_isa_for_test(isa);
      SCOPED_TRACE(int8_isa_name(isa));
      run();
    }
    set_int8_isa_for_test(std::nullopt);
  }
}

constexpr WeightType kAllTypes[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                                    WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                                    WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K};

TEST(Matmul, MatchesReferenceOverShapesTokensAndThreads) {
  std::mt19937 rng(1234);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  const int64_t rows[] = {1, 3, 17, 32, 33, 63, 100, 300};
  for (WeightType type : kAllTypes) {
    const int64_t be = weight_type_info(type).block_elems >= 256 ? 256 : 32;
    const int64_t cols[] = {be, 2 * be, 3 * be, be == 32 ? 576 : 768, 1536};
    int iter = 0;
    for (int64_t N : rows) {
      for (int64_t K : cols) {
        for (int64_t T = 1; T <= 9; T += (N > 64 ? 4 : 1)) {
          ThreadPool& pool = pools[iter++ % 3];
          check_matmul(type, N, K, T, pool, 1.0f, 1.0f, rng);
        }
      }
    }
  }
}

TEST(Matmul, BatchesThatFillPanelsAndSplitTokens) {
  // Steps of more than one token tile of the 8-bit GEMM: token tiles
  // with a padded remainder, row panels with a partial last one, token ranges split over threads
  // when the rows run out (N = 24: two panels).
  std::mt19937 rng(21);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
  for (WeightType type : kAllTypes) {
    if (!uses_int_path(type)) continue;
    const int64_t K = weight_type_info(type).block_elems >= 256 ? 512 : 576;
    for (int64_t N : {24, 37}) {
      for (int64_t T : {16, 23, 64}) {
        for (ThreadPool& pool : pools) check_matmul(type, N, K, T, pool, 1.0f, 1.0f, rng);
      }
    }
  }
}

TEST(Matmul, FloatTypesWithColsNotAMultipleOfTheVectorWidth) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16}) {
    for (int64_t K : {1, 7, 17, 50, 129}) {
      for (int64_t T : {1, 2, 5}) check_matmul(type, 19, K, T, pool, 1.0f, 1.0f, rng);
    }
  }
}

TEST(Matmul, LongRowsCrossTheMinTermChunks) {
  // The kernels collect min terms per chunk of 128/256 blocks; rows longer than that must carry
  // the partial sums across chunk boundaries (257 and 264 blocks here).
  std::mt19937 rng(12);
  ThreadPool pool(1);
  for (WeightType type : kAllTypes) {
    const int64_t K = weight_type_info(type).block_elems >= 256 ? 264 * 32 : 257 * 32;
    for (int64_t T : {1, 2, 5}) check_matmul(type, 9, K, T, pool, 1.0f, 1.0f, rng);
  }
}

TEST(Matmul, ExtremeScales) {
  std::mt19937 rng(99);
  ThreadPool pool(2);
  const float scales[][2] = {
      {1e-3f, 1.0f}, {1e3f, 1.0f}, {1.0f, 1e-4f}, {1.0f, 1e4f}, {3e3f, 3e3f}};
  for (WeightType type : kAllTypes) {
    const int64_t K = weight_type_info(type).block_elems >= 256 ? 512 : 576;
    for (const auto& s : scales) {
      for (int64_t T : {1, 5}) check_matmul(type, 37, K, T, pool, s[0], s[1], rng);
    }
  }
}

TEST(Matmul, ZeroActivationBlocksAndSpikes) {
  // Blocks of x that are all zero (amax = 0) and single huge outliers (activation spikes).
  std::mt19937 rng(7);
  ThreadPool pool(1);
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                          WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K}) {
    for (int64_t T : {3, 9}) {
      const int64_t N = 20, K = 256;
      const auto wbuf = test::random_weights(type, N, K, 1.0f, rng);
      const WeightMatrix w{type, wbuf.data(), N, K, weight_row_bytes(type, K)};
      auto x = test::random_floats(T * K, 1.0f, rng);
      for (int k = 0; k < 64; ++k) x[k] = 0.0f;
      x[K + 5] = 1e6f;
      std::vector<float> y(T * N), y_ref(T * N);
      matmul_reference(w, x.data(), T, y_ref.data());
      const auto bound = error_bounds(w, x.data(), T);
      test::for_each_matmul_path([&] {
        matmul(w, x.data(), T, y.data(), pool);
        for (int64_t i = 0; i < T * N; ++i) EXPECT_LE(std::fabs(y[i] - y_ref[i]), bound[i]) << i;
      });
    }
  }
}

}  // namespace
}  // namespace kvs
