// The packed layout (kernels/packed_layout.h) keeps every bit of the GGUF rows: packing then
// reading a row back gives the file's bytes, for every packed type and a last group that the rows
// do not fill; and it costs no more bytes than the file (Q4_K: 148 / 144).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/packed_weights.h"

namespace kvs {
namespace {

struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};

constexpr WeightType kPackedTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                                       WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K};

TEST(PackedWeightsTest, EveryRowReadsBackAsTheFilesBytes) {
  std::mt19937 rng(5);
  ThreadPool pool(3);
  for (WeightType type : kPackedTypes) {
    for (int64_t rows : {1, 16, 37}) {
      const int64_t cols = 512;
      const auto wb = test::random_weights(type, rows, cols, 1.0f, rng);
      WeightMatrix w{type, wb.data(), rows, cols, weight_row_bytes(type, cols)};
      const uint64_t bytes = packed_weight_bytes(type, rows, cols);
      std::unique_ptr<uint8_t, FreeBytes> packed(
          static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      pack_weight(w, packed.get(), pool);
      w.packed = packed.get();
      std::vector<uint8_t> row(w.row_bytes);
      for (int64_t r = 0; r < rows; ++r) {
        std::memset(row.data(), 0xA5, row.size());
        packed_row_to_gguf(w, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), wb.data() + r * w.row_bytes, w.row_bytes), 0)
            << weight_type_info(type).name << " rows " << rows << " row " << r;
      }
    }
  }
}

TEST(PackedWeightsTest, PackedBytesAreTheFilesBytesOrQ4KsFew) {
  for (WeightType type : kPackedTypes) {
    const uint64_t file = weight_row_bytes(type, 1024) * 64;
    const uint64_t packed = packed_weight_bytes(type, 64, 1024);
    if (type == WeightType::kQ4_K) {
      EXPECT_EQ(packed * 144, file * 148);
    } else {
      EXPECT_EQ(packed, file) << weight_type_info(type).name;
    }
  }
  // A last group the rows do not fill is stored whole.
  EXPECT_EQ(packed_weight_bytes(WeightType::kQ8_0, 17, 32), 2 * 16 * 34u);
  EXPECT_FALSE(packed_layout_supports(WeightType::kF16));
  EXPECT_FALSE(packed_layout_supports(WeightType::kF32));
}

}  // namespace
}  // namespace kvs
