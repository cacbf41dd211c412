// A token's matmul result must not depend on the other tokens of its step: the engine relies on
// it for "N parallel sequences give exactly the tokens of N separate runs" and "chunked prefill
// gives exactly the logits of a whole one". So every row of a T-token matmul must equal, bit for
// bit, the same token multiplied alone, for every weight type, code path (8-bit GEMM ISA or
// Highway target), tile remainder, panel split and thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/matmul.h"

namespace kvs {
namespace {

TEST(MatmulBatchInvarianceTest, EachTokenEqualsItsSingleTokenProduct) {
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                              WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                              WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K};
  // Every T up to 11 (tiles of 4 + remainders; the 8-bit GEMM's direct and panel kernels), then
  // batches that fill several token tiles and get split over threads.
  const int64_t batch_sizes[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 17, 40};
  constexpr int64_t kMaxT = 40;
  std::mt19937 rng(99);
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (WeightType type : types) {
    const int64_t cols = weight_type_info(type).block_elems == 256 ? 512 : 576;
    for (int64_t rows : {37, 64}) {
      const auto w_bytes = test::random_weights(type, rows, cols, 1.0f, rng);
      const WeightMatrix w{type, w_bytes.data(), rows, cols, weight_row_bytes(type, cols)};
      const auto x = test::random_floats(kMaxT * cols, 2.0f, rng);
      test::for_each_matmul_path([&] {
        for (ThreadPool& pool : pools) {
          std::vector<float> single(kMaxT * rows);
          for (int64_t t = 0; t < kMaxT; ++t)
            matmul(w, x.data() + t * cols, 1, single.data() + t * rows, pool);
          for (int64_t n : batch_sizes) {
            std::vector<float> y(n * rows);
            matmul(w, x.data(), n, y.data(), pool);
            ASSERT_EQ(0, std::memcmp(y.data(), single.data(), y.size() * sizeof(float)))
                << weight_type_info(type).name << " rows " << rows << " T " << n << " threads "
                << pool.num_threads();
          }
        }
      });
    }
  }
}

}  // namespace
}  // namespace kvs
