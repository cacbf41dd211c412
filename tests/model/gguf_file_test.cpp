#include "model/gguf_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "model/gguf_writer.h"
#include "model/model_paths.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

constexpr uint32_t kF32 = 0, kF16 = 1, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kBF16 = 30;

std::vector<uint8_t> filled(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}

// Offset of the first occurrence of `needle` in `bytes` (the test files are small and unique).
size_t find_bytes(const std::vector<uint8_t>& bytes, std::string_view needle) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  EXPECT_NE(it, bytes.end()) << needle;
  return static_cast<size_t>(it - bytes.begin());
}

// Expects parse failure with `code` and a message containing `substr`.
void expect_error(std::vector<uint8_t> bytes, StatusCode code, const std::string& substr) {
  auto r = GgufFile::parse_bytes(std::move(bytes));
  ASSERT_FALSE(r.is_ok()) << "expected an error containing: " << substr;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(substr), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << substr;
}

// A small valid file used by several tests: some metadata and two tensors.
GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 2);
  const std::vector<std::string> tokens = {"a", "bb", ""};
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_tensor("tok", {4, 2}, kF32, filled(32, 1));
  w.add_tensor("blk.0.attn_q.weight", {32, 1}, kQ8_0, filled(34, 2));
  return w;
}

TEST(GgufFileTest, RoundTripsEveryScalarType) {
  GgufWriter w;
  w.add_uint8("u8", 200);
  w.add_int8("i8", -100);
  w.add_uint16("u16", 60000);
  w.add_int16("i16", -30000);
  w.add_uint32("u32", 4000000000u);
  w.add_int32("i32", -2000000000);
  w.add_float32("f32", 1.5f);
  w.add_bool("yes", true);
  w.add_bool("no", false);
  w.add_string("s", "hello");
  w.add_string("empty", "");
  w.add_uint64("u64", std::numeric_limits<uint64_t>::max());
  w.add_int64("i64", std::numeric_limits<int64_t>::min());
  w.add_float64("f64", -2.25);
  auto f = GgufFile::parse_bytes(w.finish());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[0].first, "u8");
  EXPECT_EQ(f->metadata()[13].first, "f64");
  EXPECT_EQ(*f->get_uint("u8"), 200u);
  EXPECT_EQ(*f->get_int("i8"), -100);
  EXPECT_EQ(*f->get_uint("u16"), 60000u);
  EXPECT_EQ(*f->get_int("i16"), -30000);
  EXPECT_EQ(*f->get_uint("u32"), 4000000000u);
  EXPECT_EQ(*f->get_int("u32"), 4000000000);
  EXPECT_EQ(*f->get_int("i32"), -2000000000);
  EXPECT_EQ(*f->get_float("f32"), 1.5);
  EXPECT_EQ(*f->get_bool("yes"), true);
  EXPECT_EQ(*f->get_bool("no"), false);
  EXPECT_EQ(*f->get_string("s"), "hello");
  EXPECT_EQ(*f->get_string("empty"), "");
  EXPECT_EQ(*f->get_uint("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->get_float("f64"), -2.25);
  EXPECT_EQ(*f->get_float("i32"), -2000000000.0);  // integers are numbers too
  EXPECT_EQ(f->find("u8")->type(), GgufType::kUint8);
  EXPECT_EQ(f->find("f64")->type(), GgufType::kFloat64);
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_TRUE(f->tensors().empty());
}

TEST(GgufFileTest, GettersNameMissingKeysAndWrongTypes) {
  GgufWriter w;
  w.add_string("s", "x");
  w.add_int32("neg", -1);
  w.add_uint64("huge", std::numeric_limits<uint64_t>::max());
  w.add_float32("f", 0.5f);
  auto f = GgufFile::parse_bytes(w.finish());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto missing = f->get_uint("llama.block_count");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "metadata key 'llama.block_count' is missing");
  auto wrong = f->get_uint("s");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().message(), "metadata key 's' has type string, expected an integer");
  EXPECT_FALSE(f->get_uint("neg").is_ok());
  EXPECT_NE(f->get_uint("neg").status().message().find("non-negative"), std::string::npos);
  EXPECT_FALSE(f->get_int("huge").is_ok());
  EXPECT_FALSE(f->get_int("f").is_ok());
  EXPECT_FALSE(f->get_bool("f").is_ok());
  EXPECT_FALSE(f->get_string("f").is_ok());
  EXPECT_FALSE(f->get_float("s").is_ok());
  EXPECT_FALSE(f->get_string_array("s").is_ok());
  EXPECT_FALSE(f->get_int_array("s").is_ok());
  EXPECT_FALSE(f->get_float_array("s").is_ok());
}

TEST(GgufFileTest, RoundTripsArraysOfEveryType) {
  GgufWriter w;
  const std::vector<uint8_t> u8 = {0, 1, 255};
  const std::vector<int8_t> i8 = {-128, 0, 127};
  const std::vector<uint16_t> u16 = {1, 65535};
  const std::vector<int16_t> i16 = {-32768, 32767};
  const std::vector<uint32_t> u32 = {7, 4294967295u};
  const std::vector<int32_t> i32 = {-5, 6, 7};
  const std::vector<float> f32 = {0.25f, -1.0f};
  const std::vector<uint8_t> bools = {1, 0, 1};
  const std::vector<std::string> strs = {"x", "", "longer string"};
  const std::vector<uint64_t> u64 = {0, 1ull << 40};
  const std::vector<int64_t> i64 = {-(1ll << 40), 3};
  const std::vector<double> f64 = {1e300, -0.5};
  auto arr = [](GgufType t, uint64_t n, std::vector<uint8_t> e) {
    return GgufWriter::encode_array(t, n, e);
  };
  w.add_value("u8", GgufType::kArray,
              arr(GgufType::kUint8, 3, GgufWriter::encode_scalars<uint8_t>(u8)));
  w.add_value("i8", GgufType::kArray,
              arr(GgufType::kInt8, 3, GgufWriter::encode_scalars<int8_t>(i8)));
  w.add_value("u16", GgufType::kArray,
              arr(GgufType::kUint16, 2, GgufWriter::encode_scalars<uint16_t>(u16)));
  w.add_value("i16", GgufType::kArray,
              arr(GgufType::kInt16, 2, GgufWriter::encode_scalars<int16_t>(i16)));
  w.add_value("u32", GgufType::kArray,
              arr(GgufType::kUint32, 2, GgufWriter::encode_scalars<uint32_t>(u32)));
  w.add_int32_array("i32", i32);
  w.add_float32_array("f32", f32);
  w.add_value("bool", GgufType::kArray,
              arr(GgufType::kBool, 3, GgufWriter::encode_scalars<uint8_t>(bools)));
  w.add_string_array("str", strs);
  w.add_value("u64", GgufType::kArray,
              arr(GgufType::kUint64, 2, GgufWriter::encode_scalars<uint64_t>(u64)));
  w.add_value("i64", GgufType::kArray,
              arr(GgufType::kInt64, 2, GgufWriter::encode_scalars<int64_t>(i64)));
  w.add_value("f64", GgufType::kArray,
              arr(GgufType::kFloat64, 2, GgufWriter::encode_scalars<double>(f64)));
  w.add_int32_array("empty", std::vector<int32_t>{});
  auto f = GgufFile::parse_bytes(w.finish(2));
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 2u);

  EXPECT_EQ(*f->get_int_array("u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(*f->get_int_array("i8"), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(*f->get_int_array("u16"), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(*f->get_int_array("i16"), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(*f->get_int_array("u32"), (std::vector<int64_t>{7, 4294967295}));
  EXPECT_EQ(*f->get_int_array("i32"), (std::vector<int64_t>{-5, 6, 7}));
  EXPECT_EQ(*f->get_float_array("f32"), (std::vector<double>{0.25, -1.0}));
  EXPECT_EQ(*f->get_int_array("u64"), (std::vector<int64_t>{0, 1ll << 40}));
  EXPECT_EQ(*f->get_int_array("i64"), (std::vector<int64_t>{-(1ll << 40), 3}));
  EXPECT_EQ(*f->get_float_array("f64"), (std::vector<double>{1e300, -0.5}));
  EXPECT_EQ(*f->get_float_array("i32"), (std::vector<double>{-5, 6, 7}));
  EXPECT_EQ(*f->get_string_array("str"), strs);
  EXPECT_TRUE(f->get_int_array("empty")->empty());
  EXPECT_FALSE(f->get_int_array("f32").is_ok());
  EXPECT_FALSE(f->get_int_array("str").is_ok());
  EXPECT_EQ(f->get_int_array("str").status().message(),
            "metadata key 'str' has type array<string>, expected an array of integers");

  const GgufValue* b = f->find("bool");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->type(), GgufType::kArray);
  EXPECT_EQ(b->array_type(), GgufType::kBool);
  ASSERT_EQ(b->array_size(), 3u);
  EXPECT_EQ(b->element(0).to_bool(), true);
  EXPECT_EQ(b->element(1).to_bool(), false);
  EXPECT_EQ(b->raw_elements().size(), 3u);
  const GgufValue* s = f->find("str");
  EXPECT_EQ(s->element(2).string(), "longer string");
  EXPECT_EQ(s->strings().size(), 3u);
  EXPECT_EQ(f->find("u16")->element(1).to_uint(), 65535u);
  EXPECT_EQ(f->find("i8")->element(0).to_int(), -128);
}

TEST(GgufFileTest, RoundTripsNestedArrays) {
  // [[1, 2], [], [[ "a" ]]]: an array of arrays whose elements have different types.
  std::vector<uint8_t> elems;
  auto append = [&elems](const std::vector<uint8_t>& v) {
    elems.insert(elems.end(), v.begin(), v.end());
  };
  const std::vector<int16_t> ints = {1, 2};
  append(GgufWriter::encode_array(GgufType::kInt16, 2, GgufWriter::encode_scalars<int16_t>(ints)));
  append(GgufWriter::encode_array(GgufType::kFloat32, 0, {}));
  append(GgufWriter::encode_array(
      GgufType::kArray, 1,
      GgufWriter::encode_array(GgufType::kString, 1, GgufWriter::encode_string("a"))));
  GgufWriter w;
  w.add_value("nested", GgufType::kArray, GgufWriter::encode_array(GgufType::kArray, 3, elems));
  w.add_uint8("after", 9);
  auto f = GgufFile::parse_bytes(w.finish());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  const GgufValue* v = f->find("nested");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->array_type(), GgufType::kArray);
  ASSERT_EQ(v->array_size(), 3u);
  auto inner = v->nested_arrays();
  EXPECT_EQ(inner[0].array_type(), GgufType::kInt16);
  EXPECT_EQ(inner[0].element(1).to_int(), 2);
  EXPECT_EQ(inner[1].array_size(), 0u);
  EXPECT_EQ(inner[2].nested_arrays()[0].strings()[0], "a");
  EXPECT_EQ(v->element(2).nested_arrays()[0].element(0).string(), "a");
  EXPECT_EQ(v->type_string(), "array<array<int16>>");
  EXPECT_EQ(*f->get_uint("after"), 9u);
}

TEST(GgufFileTest, RoundTripsTensorsWithAlignment32And64InV2AndV3) {
  for (uint32_t version : {2u, 3u}) {
    for (uint64_t alignment : {32u, 64u}) {
      SCOPED_TRACE(testing::Message() << "v" << version << " alignment " << alignment);
      GgufWriter w;
      w.add_string("general.architecture", "llama");
      w.add_tensor("a", {3}, kF32, filled(12, 1));
      w.add_tensor("b", {32, 2}, kQ8_0, filled(68, 2));
      w.add_tensor("c", {256}, kQ4_K, filled(144, 3));
      w.add_tensor("d", {2, 2, 2, 2}, kBF16, filled(32, 4));
      w.add_tensor("e", {64}, kQ5_0, filled(44, 5));  // Q5_0: 22 bytes / 32
      w.add_tensor("f", {64}, kQ5_1, filled(48, 6));  // Q5_1: 24 bytes / 32, no kernel
      auto f = GgufFile::parse_bytes(w.finish(version, alignment));
      ASSERT_TRUE(f.is_ok()) << f.status().to_string();
      EXPECT_EQ(f->version(), version);
      EXPECT_EQ(f->alignment(), alignment);
      EXPECT_EQ(f->data_offset() % alignment, 0u);
      ASSERT_EQ(f->tensors().size(), 6u);
      EXPECT_EQ(f->total_tensor_bytes(), 12u + 68 + 144 + 32 + 44 + 48);
      const GgufTensorInfo* b = f->find_tensor("b");
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->dims, (std::vector<uint64_t>{32, 2}));
      EXPECT_EQ(b->num_elements(), 64u);
      EXPECT_EQ(b->size_bytes, 68u);
      EXPECT_EQ(b->offset % alignment, 0u);
      EXPECT_EQ(*b->weight_type(), WeightType::kQ8_0);
      EXPECT_EQ(std::vector<uint8_t>(b->bytes().begin(), b->bytes().end()), filled(68, 2));
      EXPECT_EQ(*f->find_tensor("a")->weight_type(), WeightType::kF32);
      EXPECT_EQ(*f->find_tensor("c")->weight_type(), WeightType::kQ4_K);
      EXPECT_EQ(*f->find_tensor("d")->weight_type(), WeightType::kBF16);
      EXPECT_EQ(f->find_tensor("d")->num_elements(), 16u);
      const GgufTensorInfo* e = f->find_tensor("e");
      EXPECT_EQ(e->size_bytes, 44u);
      EXPECT_EQ(std::string(e->type_name()), "Q5_0");
      EXPECT_EQ(*e->weight_type(), WeightType::kQ5_0);
      const GgufTensorInfo* g = f->find_tensor("f");
      EXPECT_EQ(g->size_bytes, 48u);
      auto wt = g->weight_type();
      ASSERT_FALSE(wt.is_ok());
      EXPECT_EQ(wt.status().code(), StatusCode::kUnimplemented);
      EXPECT_NE(wt.status().message().find("tensor 'f' has ggml type Q5_1"), std::string::npos)
          << wt.status().message();
      EXPECT_EQ(f->find_tensor("zzz"), nullptr);
      for (const auto& t : f->tensors()) {
        EXPECT_NE(t.data, nullptr);
        EXPECT_EQ(static_cast<uint64_t>(t.data - f->tensors()[0].data), t.offset);
      }
    }
  }
}

TEST(GgufFileTest, OpensAFileFromDisk) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("gguf_file_test_" + std::to_string(::getpid()) + ".gguf");
  {
    const std::vector<uint8_t> bytes = small_writer().finish();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  auto f = GgufFile::open(path.string());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  GgufFile moved = std::move(f.value());
  EXPECT_EQ(*moved.get_string("general.architecture"), "llama");
  EXPECT_EQ(moved.find_tensor("tok")->bytes()[0], 1);
  std::filesystem::remove(path);

  auto missing = GgufFile::open(path.string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  EXPECT_NE(missing.status().message().find(path.string()), std::string::npos);
}

TEST(GgufFileTest, RejectsBadMagic) {
  auto bytes = small_writer().finish();
  bytes[0] = 'X';
  expect_error(bytes, StatusCode::kDataLoss, "bad magic 'XGUF'");
  expect_error({}, StatusCode::kDataLoss, "bad magic ''");
}

TEST(GgufFileTest, RejectsUnsupportedVersions) {
  expect_error(small_writer().finish(1), StatusCode::kUnimplemented,
               "GGUF version 1 is not supported");
  expect_error(small_writer().finish(4), StatusCode::kUnimplemented, "unsupported GGUF version 4");
  expect_error(small_writer().finish(0), StatusCode::kUnimplemented, "unsupported GGUF version 0");
}

TEST(GgufFileTest, EveryTruncationFailsCleanly) {
  const auto bytes = small_writer().finish();
  ASSERT_TRUE(GgufFile::parse_bytes(bytes).is_ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = GgufFile::parse_bytes(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << n << ": " << r.status().to_string();
    EXPECT_FALSE(r.status().message().empty());
  }
}

TEST(GgufFileTest, RejectsAbsurdCounts) {
  const auto good = small_writer().finish();
  {
    auto b = good;
    poke<uint64_t>(b, 8, uint64_t{1} << 60);
    expect_error(b, StatusCode::kDataLoss, "tensor count 1152921504606846976 is implausible");
  }
  {
    auto b = good;
    poke<uint64_t>(b, 16, uint64_t{1} << 60);
    expect_error(b, StatusCode::kDataLoss, "metadata kv count 1152921504606846976 is implausible");
  }
  {
    // The length of the first key's string value ("llama").
    auto b = good;
    const size_t at = find_bytes(b, "llama") - 8;
    poke<uint64_t>(b, at, uint64_t{1} << 63);
    expect_error(b, StatusCode::kDataLoss,
                 "metadata key 'general.architecture': string length 9223372036854775808");
  }
  {
    // The key length itself.
    auto b = good;
    poke<uint64_t>(b, 24, uint64_t{1} << 63);
    expect_error(b, StatusCode::kDataLoss, "metadata key #0: string length 9223372036854775808");
  }
  {
    // The token array's length (after its u32 element type).
    auto b = good;
    const size_t at = find_bytes(b, "tokenizer.ggml.tokens") + 21 + 4 + 4;
    poke<uint64_t>(b, at, uint64_t{1} << 62);
    expect_error(b, StatusCode::kDataLoss,
                 "metadata key 'tokenizer.ggml.tokens': array length 4611686018427387904 of "
                 "string");
  }
  {
    GgufWriter w;
    w.add_value("big", GgufType::kArray,
                GgufWriter::encode_array(GgufType::kUint64, 1ull << 62, {}));
    expect_error(w.finish(), StatusCode::kDataLoss, "array length 4611686018427387904 of uint64");
  }
}

TEST(GgufFileTest, RejectsTensorDataPastEndOfFile) {
  {
    auto b = small_writer().finish();
    b.pop_back();  // the last tensor loses its last byte
    expect_error(b, StatusCode::kDataLoss,
                 "tensor 'blk.0.attn_q.weight': data [offset 32, 34 bytes] extends past end of "
                 "file");
  }
  {
    GgufWriter w;
    w.add_tensor_info("t", {4}, kF32, 1ull << 40);
    expect_error(w.finish(), StatusCode::kDataLoss,
                 "tensor 't': data [offset 1099511627776, 16 "
                 "bytes] extends past end of file");
  }
  {
    GgufWriter w;  // offset + size overflows 64 bits
    w.add_tensor_info("t", {4}, kF32, std::numeric_limits<uint64_t>::max() - 31);
    expect_error(w.finish(), StatusCode::kDataLoss, "extends past end of file");
  }
}

TEST(GgufFileTest, RejectsMisalignedTensorOffset) {
  GgufWriter w;
  w.add_tensor("a", {8}, kF32, filled(32, 0));
  w.add_tensor_info("b", {4}, kF32, 16);
  expect_error(w.finish(3, 32), StatusCode::kDataLoss,
               "tensor 'b': data offset 16 is not a multiple of the alignment 32");
}

TEST(GgufFileTest, RejectsRowLengthNotAMultipleOfTheBlockSize) {
  GgufWriter w;
  w.add_tensor("q", {33, 2}, kQ8_0, filled(68, 0));
  expect_error(w.finish(), StatusCode::kDataLoss,
               "tensor 'q': row length 33 is not a multiple of the Q8_0 block size 32");
  GgufWriter w2;
  w2.add_tensor("k", {128}, kQ4_K, filled(144, 0));
  expect_error(w2.finish(), StatusCode::kDataLoss, "row length 128 is not a multiple of the Q4_K");
}

TEST(GgufFileTest, RejectsUnknownGgmlType) {
  GgufWriter w;
  w.add_tensor("t", {32}, 4, filled(64, 0));  // 4 was Q4_2, removed from ggml
  expect_error(w.finish(), StatusCode::kDataLoss, "tensor 't': unknown ggml type 4");
  GgufWriter w2;
  w2.add_tensor("t", {32}, 1000, filled(64, 0));
  expect_error(w2.finish(), StatusCode::kDataLoss, "unknown ggml type 1000");
}

TEST(GgufFileTest, RejectsBadDims) {
  {
    GgufWriter w;
    w.add_tensor_info("t", {1, 1, 1, 1, 1}, kF32, 0);
    expect_error(w.finish(), StatusCode::kDataLoss,
                 "tensor 't': has 5 dimensions (must be 1 to 4)");
  }
  {
    GgufWriter w;
    w.add_tensor_info("t", {}, kF32, 0);
    expect_error(w.finish(), StatusCode::kDataLoss, "has 0 dimensions");
  }
  {
    GgufWriter w;
    w.add_tensor_info("t", {4, 0}, kF32, 0);
    expect_error(w.finish(), StatusCode::kDataLoss, "tensor 't': dim 1 is zero");
  }
  {
    GgufWriter w;
    w.add_tensor_info("t", {1ull << 32, 1ull << 32}, kF32, 0);
    expect_error(w.finish(), StatusCode::kDataLoss,
                 "tensor 't': element count overflows 64 bits (dims 4294967296 x 4294967296)");
  }
  {
    GgufWriter w;  // elements fit, bytes do not: 2^62 f32 = 2^64 bytes
    w.add_tensor_info("t", {1ull << 31, 1ull << 31}, kF32, 0);
    expect_error(w.finish(), StatusCode::kDataLoss, "byte size overflows 64 bits");
  }
  {
    GgufWriter w;  // a huge but representable size must not be allocated, just rejected
    w.add_tensor_info("t", {1ull << 20, 1ull << 20}, kF16, 0);
    expect_error(w.finish(), StatusCode::kDataLoss, "extends past end of file");
  }
}

TEST(GgufFileTest, RejectsDuplicateNames) {
  GgufWriter w;
  w.add_tensor("t", {8}, kF32, filled(32, 0));
  w.add_tensor("t", {8}, kF32, filled(32, 0));
  expect_error(w.finish(), StatusCode::kDataLoss, "tensor 't' appears twice (tensors #0 and #1)");
  GgufWriter w2;
  w2.add_uint8("k", 1);
  w2.add_string("k", "x");
  expect_error(w2.finish(), StatusCode::kDataLoss,
               "metadata key 'k' appears twice (entries #0 and #1)");
}

TEST(GgufFileTest, RejectsBadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w;
    w.add_uint32("general.alignment", a);
    expect_error(w.finish(), StatusCode::kDataLoss,
                 "metadata key 'general.alignment' is " + std::to_string(a) +
                     "; it must be a non-zero power of two");
  }
  GgufWriter w;
  w.add_string("general.alignment", "32");
  expect_error(w.finish(), StatusCode::kDataLoss,
               "'general.alignment' has type string, expected an unsigned integer");
}

TEST(GgufFileTest, RejectsBadValues) {
  {
    GgufWriter w;
    w.add_value("b", GgufType::kBool, {2});
    expect_error(w.finish(), StatusCode::kDataLoss, "metadata key 'b': bool at offset");
  }
  {
    GgufWriter w;
    w.add_value("t", static_cast<GgufType>(13), {0});
    expect_error(w.finish(), StatusCode::kDataLoss, "metadata key 't': unknown value type 13");
  }
  {
    GgufWriter w;
    w.add_value("a", GgufType::kArray, GgufWriter::encode_array(static_cast<GgufType>(99), 0, {}));
    expect_error(w.finish(), StatusCode::kDataLoss, "unknown array element type 99");
  }
  {
    // Arrays nested 100 deep.
    std::vector<uint8_t> v = GgufWriter::encode_array(GgufType::kUint8, 0, {});
    for (int i = 0; i < 100; ++i) v = GgufWriter::encode_array(GgufType::kArray, 1, v);
    GgufWriter w;
    w.add_value("deep", GgufType::kArray, v);
    expect_error(w.finish(), StatusCode::kDataLoss, "arrays nested more than 8 deep");
  }
}

// The seed corpus for tests/fuzz/gguf_fuzz: small files that must all parse. Always checked; the
// files are written into $KVSERVE_GGUF_SEED_DIR only when it is set (see docs/fuzzing.md), so
// the test never skips and never passes without checking something.
TEST(GgufFileTest, WritesFuzzSeedsWhenAsked) {
  std::vector<std::vector<uint8_t>> seeds;
  seeds.push_back(small_writer().finish(3));
  seeds.push_back(small_writer().finish(2, 64));
  {
    GgufWriter w;
    w.add_uint8("u8", 1);
    w.add_int8("i8", -1);
    w.add_uint16("u16", 2);
    w.add_int16("i16", -2);
    w.add_uint32("u32", 3);
    w.add_int32("i32", -3);
    w.add_float32("f32", 0.5f);
    w.add_bool("b", true);
    w.add_string("s", "str");
    w.add_uint64("u64", 4);
    w.add_int64("i64", -4);
    w.add_float64("f64", 0.25);
    const std::vector<float> f = {1.0f, 2.0f};
    w.add_float32_array("fa", f);
    std::vector<uint8_t> inner =
        GgufWriter::encode_array(GgufType::kString, 1, GgufWriter::encode_string("x"));
    w.add_value("nested", GgufType::kArray, GgufWriter::encode_array(GgufType::kArray, 1, inner));
    seeds.push_back(w.finish());
  }
  {
    GgufWriter w;
    w.add_tensor("a", {2}, kF32, filled(8, 1));
    w.add_tensor("b", {32}, kQ8_0, filled(34, 2));
    w.add_tensor("c", {256}, kQ4_K, filled(144, 3));
    w.add_tensor("d", {2, 2, 2}, kBF16, filled(16, 4));
    seeds.push_back(w.finish(3, 64));
  }
  for (size_t i = 0; i < seeds.size(); ++i)
    ASSERT_TRUE(GgufFile::parse_bytes(seeds[i]).is_ok()) << "seed " << i;
  const char* dir = std::getenv("KVSERVE_GGUF_SEED_DIR");
  if (dir == nullptr || *dir == 0) return;  // not asked to write them
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::filesystem::path(dir) / ("seed" + std::to_string(i) + ".gguf"),
                      std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()),
              static_cast<std::streamsize>(seeds[i].size()));
    ASSERT_TRUE(out.good());
  }
}

TEST(GgufFileTest, OpensTheDefaultModel) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path))
    SKIP_OR_FAIL_IN_CI() << path << " missing (run scripts/fetch-model)";
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f->tensors().size(), 272u);
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(*emb->weight_type(), WeightType::kQ8_0);
  EXPECT_EQ(emb->dims, (std::vector<uint64_t>{576, 49152}));
  auto tokens = f->get_string_views("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().to_string();
  EXPECT_EQ(tokens->size(), 49152u);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 49152u);
  uint64_t end = 0;
  for (const auto& t : f->tensors())
    end = std::max(end, f->data_offset() + t.offset + t.size_bytes);
  EXPECT_LE(end, f->file_size());
}

}  // namespace
}  // namespace kvs
