// The 8-bit GEMM ISAs against each other: every ISA this CPU supports must give bit-identical
// results to the Highway int16 path on its AVX2 target (same int32 lane sums, same f32 order; see
// kernels/int8_gemm.h), including at the extremes where a u8 x s8 pair sum could saturate.
// ISAs the CPU lacks are compiled but reported as skipped. (matmul_test.cpp and
// matmul_batch_invariance_test.cpp check every path against the scalar reference.)
#include <cpuid.h>
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/int8_isa.h"
#include "kernels/int8_matmul.h"
#include "kernels/matmul.h"

namespace kvs {
namespace {

constexpr WeightType kIntTypes[] = {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                                    WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K};

// Byte range [first, last) of a block that holds quantized values (not the f16 scales).
std::pair<int, int> quant_bytes(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0: return {2, 34};
    case WeightType::kQ4_0: return {2, 18};
    case WeightType::kQ4_1: return {4, 20};
    case WeightType::kQ5_0: return {2, 22};
    case WeightType::kQ4_K: return {4, 144};  // 6-bit scales and mins too: any byte is valid
    case WeightType::kQ6_K: return {0, 208};  // ql, qh and the int8 sub-scales
    default: return {0, 0};
  }
}

class Int8IsaTest : public ::testing::TestWithParam<Int8Isa> {
 protected:
  void SetUp() override {
    if (!int8_isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU lacks " << int8_isa_name(GetParam())
                   << ": its kernels are compiled but cannot run here";
    if ((hwy::SupportedTargets() & HWY_AVX2) == 0)
      GTEST_SKIP() << "no AVX2: no Highway AVX2 path to compare with";
  }
  void TearDown() override {
    set_int8_isa_for_test(std::nullopt);
    set_int8_prefetch_one_token_for_test(std::nullopt);
    hwy::SetSupportedTargetsForTest(0);
  }

  // y of the ISA under test, with and without the one-token prefetch (every CPU runs both
  // variants here, whichever it uses), and of the Highway int16 path on AVX2, same inputs.
  void expect_same_bits(const WeightMatrix& w, const std::vector<float>& x, int64_t T,
                        ThreadPool& pool) {
    std::vector<float> y(T * w.rows), y_hwy(T * w.rows);
    set_int8_isa_for_test(Int8Isa::kNone);
    hwy::SetSupportedTargetsForTest(HWY_AVX2);
    matmul(w, x.data(), T, y_hwy.data(), pool);
    hwy::SetSupportedTargetsForTest(0);
    set_int8_isa_for_test(GetParam());
    for (bool prefetch_one : {false, true}) {
      set_int8_prefetch_one_token_for_test(prefetch_one);
      std::fill(y.begin(), y.end(), -1.0f);
      matmul(w, x.data(), T, y.data(), pool);
      for (int64_t i = 0; i < T * w.rows; ++i) {
        if (std::memcmp(&y[i], &y_hwy[i], sizeof(float)) != 0) {
          ADD_FAILURE() << weight_type_info(w.type).name << " N=" << w.rows << " K=" << w.cols
                        << " T=" << T << " t=" << i / w.rows << " n=" << i % w.rows
                        << " prefetch_one=" << prefetch_one << ": " << y[i] << " vs Highway AVX2 "
                        << y_hwy[i];
          return;
        }
      }
    }
  }
};

TEST_P(Int8IsaTest, BitIdenticalToHighwayAvx2) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  for (WeightType type : kIntTypes) {
    const int64_t be = weight_type_info(type).block_elems;
    for (int64_t K :
         {be == 256 ? int64_t{256} : int64_t{64}, be == 256 ? int64_t{2304} : int64_t{1536},
          be == 256 ? int64_t{66 * 256} : int64_t{264 * 32}}) {
      const int64_t N = K > 4096 ? 9 : 35;
      const auto wb = test::random_weights(type, N, K, 1.0f, rng);
      const WeightMatrix w{type, wb.data(), N, K, weight_row_bytes(type, K)};
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
        if (K > 4096 && T > 5) continue;
        expect_same_bits(w, test::random_floats(T * K, 1.5f, rng), T, pool);
      }
    }
  }
}

TEST_P(Int8IsaTest, BitIdenticalAtTheExtremes) {
  // Quantized bytes all 0x00, 0xFF, 0x80 or 0x7F (Q8_0: -128 and 127, nibbles 0 and 15, Q6_K
  // sub-scales -128), activations whose blocks round to +-127: the largest pair sums.
  std::mt19937 rng(4);
  ThreadPool pool(1);
  for (WeightType type : kIntTypes) {
    const auto& info = weight_type_info(type);
    const int64_t K = info.block_elems == 256 ? 512 : 128, N = 6;
    for (uint8_t pattern : {0x00, 0xFF, 0x80, 0x7F}) {
      auto wb = test::random_weights(type, N, K, 1.0f, rng);
      const auto [first, last] = quant_bytes(type);
      for (size_t b = 0; b < wb.size(); b += info.block_bytes)
        std::memset(wb.data() + b + first, pattern, static_cast<size_t>(last - first));
      const WeightMatrix w{type, wb.data(), N, K, weight_row_bytes(type, K)};
      for (float v : {1.0f, -1.0f}) {
        for (int64_t T : {1, 6}) {
          std::vector<float> x(T * K, v);
          for (size_t i = 0; i < x.size(); i += 2) x[i] = -v;
          expect_same_bits(w, x, T, pool);
        }
      }
    }
  }
}

TEST_P(Int8IsaTest, PeakLoopComputesItsDotProducts) {
  // 3 x -5 per byte, every multiply-add of the round counted once.
  EXPECT_EQ(int8_peak_loop(GetParam(), 1000),
            int64_t{1000} * int8_peak_macs_per_iter(GetParam()) * -15);
}

INSTANTIATE_TEST_SUITE_P(Isas, Int8IsaTest,
                         ::testing::Values(Int8Isa::kAvx2, Int8Isa::kAvxVnni, Int8Isa::kAvx512Vnni),
                         [](const ::testing::TestParamInfo<Int8Isa>& info) {
                           std::string name = int8_isa_name(info.param);
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(Int8Isa, DefaultChoiceUnlessForced) {
  const Int8Isa active = int8_isa_active();
  EXPECT_TRUE(int8_isa_supported(active));
  const char* env = std::getenv("KVSERVE_INT8_ISA");
  if (env == nullptr || *env == '\0') {
    const Int8Isa want = int8_isa_supported(Int8Isa::kAvx512Vnni) ? Int8Isa::kAvx512Vnni
                         : int8_isa_supported(Int8Isa::kAvxVnni)  ? Int8Isa::kAvxVnni
                         : int8_isa_supported(Int8Isa::kAvx2)     ? Int8Isa::kAvx2
                                                                  : Int8Isa::kNone;
    EXPECT_EQ(active, want) << int8_isa_name(active);
  }
  set_int8_isa_for_test(Int8Isa::kNone);
  EXPECT_EQ(int8_isa_active(), Int8Isa::kNone);
  if (int8_isa_supported(Int8Isa::kAvx2)) {
    set_int8_isa_for_test(Int8Isa::kAvx2);
    EXPECT_EQ(int8_isa_active(), Int8Isa::kAvx2);
  }
  set_int8_isa_for_test(std::nullopt);
  EXPECT_EQ(int8_isa_active(), active);
}

TEST(Int8Isa, OneTokenPrefetchByCpuUnlessForced) {
  const bool chosen = int8_prefetch_one_token();
  const char* env = std::getenv("KVSERVE_INT8_PREFETCH_1TOKEN");
  if (env == nullptr || *env == '\0') {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    ASSERT_NE(__get_cpuid(1, &eax, &ebx, &ecx, &edx), 0);
    const unsigned family =
        ((eax >> 8) & 0xF) == 0xF ? 0xF + ((eax >> 20) & 0xFF) : (eax >> 8) & 0xF;
    EXPECT_EQ(chosen, __builtin_cpu_is("amd") && family >= 0x1A)
        << "family 0x" << std::hex << family;
  }
  set_int8_prefetch_one_token_for_test(!chosen);
  EXPECT_EQ(int8_prefetch_one_token(), !chosen);
  set_int8_prefetch_one_token_for_test(std::nullopt);
  EXPECT_EQ(int8_prefetch_one_token(), chosen);
}

}  // namespace
}  // namespace kvs
