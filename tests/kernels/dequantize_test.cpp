#include "kernels/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/kernel_test_util.h"

namespace kvs {
namespace {

using test::store_f16;

TEST(Dequantize, Q4_1HandBlock) {
  uint8_t b[20];
  store_f16(b, 0.5f);       // d
  store_f16(b + 2, -3.0f);  // m
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row_reference(WeightType::kQ4_1, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * j - 3.0f) << j;              // lo nibble = element j
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 3.0f) << j;  // hi nibble = element j + 16
  }
}

TEST(Dequantize, Q4_0HandBlock) {
  uint8_t b[18];
  store_f16(b, 2.0f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row_reference(WeightType::kQ4_0, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * (7 - j));
  }
}

TEST(Dequantize, Q5_0HandBlock) {
  // Element e: low 4 bits from nibble e (lo nibbles of qs = elements 0..15, hi = 16..31), bit 4
  // from bit e of the 32-bit little-endian qh; value d * (q - 16).
  uint8_t b[22];
  store_f16(b, 0.5f);
  const uint32_t qh = 0xA5C3F00Fu;
  std::memcpy(b + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row_reference(WeightType::kQ5_0, b, y, 32);
  for (int e = 0; e < 32; ++e) {
    const int nib = e < 16 ? e : 15 - (e - 16);
    const int q = nib | static_cast<int>(((qh >> e) & 1) << 4);
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(q - 16)) << e;
  }
}

TEST(Dequantize, Q8_0HandBlock) {
  uint8_t b[34];
  store_f16(b, 0.25f);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  float y[32];
  dequantize_row_reference(WeightType::kQ8_0, b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * (j * 8 - 128));
}

TEST(Dequantize, Q4_KHandBlock) {
  // Sub-block j (32 elements) has scale sc[j] and min mn[j] (6 bits each). Sub-blocks 5 and 7 use
  // the high 2 bits, which live in the top bits of bytes 0..7.
  const int sc[8] = {1, 2, 3, 4, 5, 42, 7, 8};
  const int mn[8] = {0, 1, 2, 3, 4, 5, 6, 49};
  uint8_t b[144] = {};
  store_f16(b, 1.0f);      // d
  store_f16(b + 2, 0.5f);  // dmin
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  uint8_t* qs = b + 16;
  for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>(i * 7 + 3);
  float y[256];
  dequantize_row_reference(WeightType::kQ4_K, b, y, 256);
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[(j / 2) * 32 + l];
      const int q = (j % 2 == 0) ? (byte & 15) : (byte >> 4);
      EXPECT_EQ(y[j * 32 + l], 1.0f * sc[j] * q - 0.5f * mn[j]) << j << " " << l;
    }
  }
}

TEST(Dequantize, Q6_KHandBlock) {
  uint8_t b[210];
  for (int i = 0; i < 208; ++i) b[i] = static_cast<uint8_t>(i * 13 + 5);
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int i = 0; i < 16; ++i) sc[i] = static_cast<int8_t>(i * 9 - 70);
  store_f16(b + 208, 0.125f);
  float y[256];
  dequantize_row_reference(WeightType::kQ6_K, b, y, 256);
  // Element e: half h (128 each), quarter qd (32 each) of the half, lane l. Low 4 bits come from
  // ql[h*64 + (qd&1)*32 + l] (low nibble for qd < 2), high 2 bits from qh[h*32 + l] >> 2*qd.
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, qd = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b[h * 64 + (qd & 1) * 32 + l];
    const int low = qd < 2 ? (lo & 15) : (lo >> 4);
    const int high = (b[128 + h * 32 + l] >> (2 * qd)) & 3;
    const int q = (low | (high << 4)) - 32;
    EXPECT_EQ(y[e], 0.125f * static_cast<float>(sc[h * 8 + qd * 2 + l / 16] * q)) << e;
  }
}

TEST(Dequantize, FastMatchesReferenceExactly) {
  std::mt19937 rng(5);
  for (WeightType type :
       {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0, WeightType::kQ4_0,
        WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ6_K}) {
    const int64_t be = weight_type_info(type).block_elems >= 256 ? 256 : 32;
    for (int64_t blocks : {1, 2, 3, 7, 18, 48}) {
      const int64_t n = blocks * be;
      for (float scale : {1e-3f, 1.0f, 1e3f}) {
        auto w = test::random_weights(type, 1, n, scale, rng);
        // Misaligned source and destination.
        std::vector<uint8_t> src(w.size() + 1);
        std::memcpy(src.data() + 1, w.data(), w.size());
        std::vector<float> ref(n), out(n + 1);
        dequantize_row_reference(type, src.data() + 1, ref.data(), n);
        test::for_each_target([&] {
          dequantize_row(type, src.data() + 1, out.data() + 1, n);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(bits_from_f32(out[i + 1]), bits_from_f32(ref[i]))
                << weight_type_info(type).name << " n=" << n << " i=" << i;
          }
        });
      }
    }
  }
}

// Golden rows made by tools/gen_kernel_golden.py with the gguf Python package
// (gguf.quants.dequantize): real Q4_1/Q8_0 rows of SmolLM2-135M and Q5_0 rows of Gemma 3 270M,
// plus random Q4_0/Q4_K/Q6_K/Q5_0 blocks.
TEST(Dequantize, MatchesGgufPythonGolden) {
  const std::string path = std::string(KVSERVE_TEST_DATA_DIR) + "/dequant_golden.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << " (it is in the repository: tests/data)";
  const auto j = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& c : j.at("cases")) {
    const std::string type_name = c.at("type");
    WeightType type = WeightType::kF32;
    bool found = false;
    for (const auto& info : kWeightTypeInfos) {
      if (type_name == info.name) {
        type = info.type;
        found = true;
      }
    }
    ASSERT_TRUE(found) << type_name;
    const std::string hex = c.at("bytes_hex");
    std::vector<uint8_t> bytes(hex.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    const std::vector<float> expect = c.at("values").get<std::vector<float>>();
    const int64_t n = static_cast<int64_t>(expect.size());
    ASSERT_EQ(bytes.size(), weight_row_bytes(type, n)) << c.at("name");
    std::vector<float> ref(n), fast(n);
    dequantize_row_reference(type, bytes.data(), ref.data(), n);
    dequantize_row(type, bytes.data(), fast.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // gguf computes in f32 as well; allow 1 ulp for a different operation order.
      ASSERT_NEAR(ref[i], expect[i], 1e-6 * std::fabs(expect[i]) + 1e-30)
          << c.at("name") << " i=" << i;
      ASSERT_EQ(fast[i], ref[i]) << c.at("name") << " i=" << i;
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

}  // namespace
}  // namespace kvs
