// The integer path's arithmetic, as matmul.h states it, written out in scalar code: per (row,
// token) and 32-element block in order, the exact integer sum of the weight's integers and the
// activation's int8 values, then acc = fma(f32(isum), d_w * d_x, acc) and, for Q4_1 / Q4_K,
// acc = fma(m, s, acc). Every path (each 8-bit GEMM ISA, the Highway int16 path on every target)
// must give these bits, whatever the step's size, the rows' count and the threads.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernel_test_util.h"
#include "kernels/dequantize.h"
#include "kernels/matmul.h"
#include "kernels/packed_weights.h"

namespace kvs {
namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One 32-element block of a weight row: its integers (natural order), d_w and the min term m.
struct IntBlock {
  int32_t w[32];
  float dw, m;
};

// Block b of row `row` (K elements) of `type`, read from the GGUF layout.
IntBlock int_block(WeightType type, const uint8_t* row, int64_t b) {
  IntBlock o{};
  switch (type) {
    case WeightType::kQ8_0: {
      const uint8_t* blk = row + b * 34;
      o.dw = f16_at(blk);
      for (int e = 0; e < 32; ++e) o.w[e] = static_cast<int8_t>(blk[2 + e]);
      return o;
    }
    case WeightType::kQ4_0:
    case WeightType::kQ4_1: {
      const bool min = type == WeightType::kQ4_1;
      const uint8_t* blk = row + b * (min ? 20 : 18);
      const uint8_t* qs = blk + (min ? 4 : 2);
      o.dw = f16_at(blk);
      if (min) o.m = f16_at(blk + 2);
      for (int e = 0; e < 16; ++e) {
        o.w[e] = (qs[e] & 0x0F) - (min ? 0 : 8);
        o.w[e + 16] = (qs[e] >> 4) - (min ? 0 : 8);
      }
      return o;
    }
    case WeightType::kQ5_0: {
      const uint8_t* blk = row + b * 22;
      o.dw = f16_at(blk);
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      for (int e = 0; e < 16; ++e) {
        o.w[e] = ((blk[6 + e] & 0x0F) | (((qh >> e) & 1) << 4)) - 16;
        o.w[e + 16] = ((blk[6 + e] >> 4) | (((qh >> (e + 16)) & 1) << 4)) - 16;
      }
      return o;
    }
    case WeightType::kQ4_K: {
      const uint8_t* blk = row + (b / 8) * 144;
      const int j = static_cast<int>(b % 8);
      int sc, mn;
      q4k_scale_min(j, blk + 4, &sc, &mn);
      o.dw = f16_at(blk) * static_cast<float>(sc);
      o.m = -f16_at(blk + 2) * static_cast<float>(mn);
      const uint8_t* qs = blk + 16 + 32 * (j / 2);
      for (int e = 0; e < 32; ++e) o.w[e] = (j & 1) ? qs[e] >> 4 : qs[e] & 0x0F;
      return o;
    }
    case WeightType::kQ6_K: {
      const uint8_t* blk = row + (b / 8) * 210;
      const int j = static_cast<int>(b % 8), h = j / 4, qd = j % 4;
      const uint8_t* ql = blk + h * 64 + (qd & 1) * 32;
      const uint8_t* qh = blk + 128 + h * 32;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192) + h * 8 + qd * 2;
      o.dw = f16_at(blk + 208);
      for (int e = 0; e < 32; ++e) {
        const int nib = qd < 2 ? ql[e] & 0x0F : ql[e] >> 4;
        const int q = (nib | (((qh[e] >> (2 * qd)) & 3) << 4)) - 32;
        o.w[e] = sc[e / 16] * q;
      }
      return o;
    }
    default: ADD_FAILURE() << "not an integer-path type"; return o;
  }
}

// y [T][N] by the stated arithmetic.
std::vector<float> stated_arithmetic(const WeightMatrix& w, const std::vector<float>& x,
                                     int64_t T) {
  const int64_t K = w.cols, KB = K / 32, N = w.rows;
  const bool has_min = w.type == WeightType::kQ4_1 || w.type == WeightType::kQ4_K;
  std::vector<float> y(T * N);
  for (int64_t t = 0; t < T; ++t) {
    // The activation's blocks: d = amax / 127, q = round-to-nearest-even(x / d), s = d * sum(q).
    std::vector<int32_t> q(K);
    std::vector<float> d(KB), s(KB);
    for (int64_t b = 0; b < KB; ++b) {
      const float* xb = x.data() + t * K + b * 32;
      float amax = 0;
      for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xb[e]));
      d[b] = amax / 127.0f;
      const float id = d[b] > 0 ? 1.0f / d[b] : 0.0f;
      int32_t sum = 0;
      for (int e = 0; e < 32; ++e)
        sum += q[b * 32 + e] = static_cast<int32_t>(std::nearbyint(xb[e] * id));
      s[b] = d[b] * static_cast<float>(sum);
    }
    for (int64_t n = 0; n < N; ++n) {
      const auto* row = static_cast<const uint8_t*>(w.data) + n * w.row_bytes;
      float acc = 0.0f;
      for (int64_t b = 0; b < KB; ++b) {
        const IntBlock wb = int_block(w.type, row, b);
        int64_t isum = 0;
        for (int e = 0; e < 32; ++e) isum += int64_t{wb.w[e]} * q[b * 32 + e];
        acc = std::fma(static_cast<float>(isum), wb.dw * d[b], acc);
        if (has_min) acc = std::fma(wb.m, s[b], acc);
      }
      y[t * N + n] = acc;
    }
  }
  return y;
}

TEST(MatmulArithmeticTest, EveryPathGivesTheStatedArithmeticsBits) {
  std::mt19937 rng(11);
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1,
                          WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K}) {
    // 37 rows: whole 16-row groups, an 8-row half and a short one.
    const int64_t rows = 37, cols = 512;
    const auto wb = test::random_weights(type, rows, cols, 1.0f, rng);
    // The same rows packed once (as at model load) and packed per step by the GEMM.
    std::vector<uint8_t> packed(packed_weight_bytes(type, rows, cols) + 64);
    uint8_t* aligned = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    WeightMatrix w{type, wb.data(), rows, cols, weight_row_bytes(type, cols)};
    {
      ThreadPool pool(2);
      pack_weight(w, aligned, pool);
    }
    for (int64_t T : {1, 2, 4, 5, 8, 9, 17, 40}) {
      const std::vector<float> x = test::random_floats(T * cols, 1.5f, rng);
      const std::vector<float> want = stated_arithmetic(w, x, T);
      for (int threads : {1, 3}) {
        ThreadPool pool(threads);
        test::for_each_matmul_path([&] {
          // HWY_SCALAR has no integer path (dequantize + f32 dot).
          if (hwy::SupportedTargets() == HWY_SCALAR) return;
          for (const uint8_t* p :
               {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(aligned)}) {
            w.packed = p;
            std::vector<float> y(T * rows);
            matmul(w, x.data(), T, y.data(), pool);
            for (int64_t i = 0; i < T * rows; ++i)
              ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
                  << weight_type_info(type).name << (p ? " packed" : "") << " T " << T
                  << " threads " << threads << " token " << i / rows << " row " << i % rows << ": "
                  << y[i] << " vs " << want[i];
          }
        });
      }
    }
  }
}

}  // namespace
}  // namespace kvs
