// matmul_group (a layer's Q, K and V, its gate and up, over one input) gives the bits of one
// matmul() per weight, for every weight type, code path, step size and thread count, with rows
// that do not fill a chunk or a panel; and where the 8-bit GEMM takes the step it runs them in
// one parallel region (plus one for quantizing a large input) instead of one or two each. The
// gated form (gate and up with their activation) keeps those bits.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/int8_matmul.h"
#include "kernels/matmul.h"

namespace kvs {
namespace {

TEST(MatmulGroupTest, SameBitsAsOneMatmulPerWeight) {
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kQ8_0,
                              WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0,
                              WeightType::kQ4_K, WeightType::kQ6_K};
  std::mt19937 rng(7);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (WeightType type : types) {
    const int64_t cols = weight_type_info(type).block_elems == 256 ? 512 : 576;
    const std::array<int64_t, 3> rows = {64, 37, 150};  // q, k, v of unequal heights
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<WeightMatrix> ws;
    for (int64_t n : rows) bytes.push_back(test::random_weights(type, n, cols, 1.0f, rng));
    for (size_t i = 0; i < rows.size(); ++i)
      ws.push_back({type, bytes[i].data(), rows[i], cols, weight_row_bytes(type, cols)});
    for (int64_t T : {1, 3, 5, 17, 64}) {
      const auto x = test::random_floats(T * cols, 2.0f, rng);
      test::for_each_matmul_path([&] {
        for (ThreadPool& pool : pools) {
          std::vector<std::vector<float>> alone(rows.size()), grouped(rows.size());
          std::vector<MatmulOutput> outs;
          for (size_t i = 0; i < rows.size(); ++i) {
            alone[i].assign(T * rows[i], 0.0f);
            grouped[i].assign(T * rows[i], -1.0f);
            matmul(ws[i], x.data(), T, alone[i].data(), pool);
            outs.push_back({&ws[i], grouped[i].data()});
          }
          matmul_group(outs, x.data(), T, pool);
          for (size_t i = 0; i < rows.size(); ++i)
            ASSERT_EQ(std::memcmp(alone[i].data(), grouped[i].data(), alone[i].size() * 4), 0)
                << weight_type_info(type).name << " T=" << T << " weight " << i << " threads "
                << pool.num_threads();
        }
      });
    }
  }
}

// matmul_gated (the activation applied inside the GEMM's region, a group of rows at a time) gives
// the bits of matmul_group({gate, up}) followed by the activation over the whole [T][F], for
// every weight type, both activations, every code path, step size and thread count; and where
// the rows are not whole groups of 16 (the unfused path) too.
TEST(MatmulGroupTest, GatedSameBitsAsGroupThenActivation) {
  const WeightType types[] = {WeightType::kF32,  WeightType::kQ8_0, WeightType::kQ4_0,
                              WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ4_K,
                              WeightType::kQ6_K};
  std::mt19937 rng(11);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (WeightType type : types)
    for (int64_t F : {96, 40}) {
      const int64_t cols = weight_type_info(type).block_elems == 256 ? 512 : 576;
      const auto gb = test::random_weights(type, F, cols, 1.0f, rng);
      const auto ub = test::random_weights(type, F, cols, 1.0f, rng);
      const WeightMatrix gate{type, gb.data(), F, cols, weight_row_bytes(type, cols)};
      const WeightMatrix up{type, ub.data(), F, cols, weight_row_bytes(type, cols)};
      for (int64_t T : {1, 5, 17, 64})
        for (GateActivation act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
          const auto x = test::random_floats(T * cols, 2.0f, rng);
          test::for_each_matmul_path([&] {
            for (ThreadPool& pool : pools) {
              std::vector<float> want(T * F), want_up(T * F), got(T * F, -1.0f), scratch(T * F);
              const std::array<MatmulOutput, 2> outs = {
                  {{&gate, want.data()}, {&up, want_up.data()}}};
              matmul_group(outs, x.data(), T, pool);
              gated_activation(act, want.data(), want_up.data(), T * F, want.data());
              matmul_gated(gate, up, act, x.data(), T, got.data(), scratch.data(), pool);
              ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
                  << weight_type_info(type).name << " F=" << F << " T=" << T << " threads "
                  << pool.num_threads();
            }
          });
        }
    }
}

TEST(MatmulGroupTest, MixedTypesFallBackToOneMatmulEach) {
  std::mt19937 rng(8);
  const int64_t cols = 512;
  const auto qb = test::random_weights(WeightType::kQ4_K, 48, cols, 1.0f, rng);
  const auto vb = test::random_weights(WeightType::kQ6_K, 48, cols, 1.0f, rng);
  const WeightMatrix q{WeightType::kQ4_K, qb.data(), 48, cols,
                       weight_row_bytes(WeightType::kQ4_K, cols)};
  const WeightMatrix v{WeightType::kQ6_K, vb.data(), 48, cols,
                       weight_row_bytes(WeightType::kQ6_K, cols)};
  ThreadPool pool(2);
  const auto x = test::random_floats(9 * cols, 1.0f, rng);
  std::vector<float> q1(9 * 48), v1(9 * 48), q2(9 * 48), v2(9 * 48);
  matmul(q, x.data(), 9, q1.data(), pool);
  matmul(v, x.data(), 9, v1.data(), pool);
  const std::array<MatmulOutput, 2> outs = {{{&q, q2.data()}, {&v, v2.data()}}};
  matmul_group(outs, x.data(), 9, pool);
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(v1, v2);
}

TEST(MatmulGroupTest, OneParallelRegionWhereTheEightBitGemmRuns) {
  if (int8_isa_active() == Int8Isa::kNone) GTEST_SKIP() << "no 8-bit GEMM ISA on this CPU";
  std::mt19937 rng(9);
  const int64_t cols = 576;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightMatrix> ws;
  for (int64_t n : {576, 192, 192}) {
    bytes.push_back(test::random_weights(WeightType::kQ4_1, n, cols, 1.0f, rng));
    ws.push_back({WeightType::kQ4_1, bytes.back().data(), n, cols,
                  weight_row_bytes(WeightType::kQ4_1, cols)});
  }
  ThreadPool pool(2);
  for (int64_t T : {1, 64}) {  // a decode step, a prefill chunk
    const auto x = test::random_floats(T * cols, 1.0f, rng);
    std::vector<std::vector<float>> ys(3);
    std::vector<MatmulOutput> outs;
    for (size_t i = 0; i < 3; ++i) {
      ys[i].resize(T * ws[i].rows);
      outs.push_back({&ws[i], ys[i].data()});
    }
    uint64_t before = pool.regions();
    for (size_t i = 0; i < 3; ++i) matmul(ws[i], x.data(), T, ys[i].data(), pool);
    const uint64_t separate = pool.regions() - before;
    before = pool.regions();
    matmul_group(outs, x.data(), T, pool);
    const uint64_t grouped = pool.regions() - before;
    // Quantizing a large input is a region of its own, once per call.
    const uint64_t quantize = T * cols >= (int64_t{1} << 16) ? 1 : 0;
    EXPECT_EQ(grouped, 1 + quantize) << "T=" << T;
    EXPECT_EQ(separate, 3 * (1 + quantize)) << "T=" << T;
  }
}

}  // namespace
}  // namespace kvs
