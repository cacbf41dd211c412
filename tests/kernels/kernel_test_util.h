// Random data generators shared by the kernel tests: weight rows of every WeightType with
// controlled (finite, sometimes extreme) block scales.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include "core/half.h"
#include "core/weight_type.h"
#include "kernels/int8_isa.h"
#include "support/simd_targets.h"  // for_each_target

namespace kvs::test {

inline void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Random rows x cols matrix of `type`. `scale` sets the magnitude of block scales / values;
// scales vary per block over about two decades so that rows mix small and large blocks.
inline std::vector<uint8_t> random_weights(WeightType type, int64_t rows, int64_t cols, float scale,
                                           std::mt19937& rng) {
  const uint64_t row_bytes = weight_row_bytes(type, static_cast<uint64_t>(cols));
  std::vector<uint8_t> buf(row_bytes * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : buf) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_real_distribution<float> mag(0.1f, 10.0f);
  const auto& info = weight_type_info(type);
  const int64_t nblocks = rows * cols / info.block_elems;
  for (int64_t i = 0; i < nblocks; ++i) {
    uint8_t* b = buf.data() + i * info.block_bytes;
    switch (type) {
      case WeightType::kF32: {
        const float v = u(rng) * scale;
        std::memcpy(b, &v, 4);
        break;
      }
      case WeightType::kF16: store_f16(b, u(rng) * scale); break;
      case WeightType::kBF16: {
        const uint16_t h = f32_to_bf16(u(rng) * scale);
        std::memcpy(b, &h, 2);
        break;
      }
      case WeightType::kQ8_0:
      case WeightType::kQ4_0:
      case WeightType::kQ5_0: store_f16(b, u(rng) * mag(rng) * scale * 0.01f); break;
      case WeightType::kQ4_1:
        store_f16(b, mag(rng) * scale * 0.01f);
        store_f16(b + 2, u(rng) * mag(rng) * scale * 0.08f);
        break;
      case WeightType::kQ4_K:
        store_f16(b, mag(rng) * scale * 0.001f);
        store_f16(b + 2, mag(rng) * scale * 0.001f);
        break;
      case WeightType::kQ6_K: store_f16(b + 208, u(rng) * mag(rng) * scale * 0.0002f); break;
    }
  }
  return buf;
}

inline std::vector<float> random_floats(int64_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng) * scale;
  return v;
}

// Runs f() once with the default path choice, then once per matmul code path this CPU
// supports: each 8-bit GEMM ISA (AVX2, AVX-VNNI,
// AVX512-VNNI), and the Highway int16 fallback (forced) on every Highway target. Paths the CPU
// lacks are not run; tests/kernels/int8_matmul_test.cpp reports them as skipped.
template <class F>
void for_each_matmul_path(F&& f) {
  {
    SCOPED_TRACE("default path choice");  // the best 8-bit ISA, or Highway without AVX2
    f();
  }
  for (Int8Isa isa : kAllInt8Isas) {
    if (!int8_isa_supported(isa)) continue;
    set_int8_isa_for_test(isa);
    SCOPED_TRACE(int8_isa_name(isa));
    if (isa == Int8Isa::kNone) {
      for_each_target(f);
    } else {
      f();
    }
  }
  set_int8_isa_for_test(std::nullopt);
}

}  // namespace kvs::test
