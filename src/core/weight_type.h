// Weight tensor element types (the ggml block formats kvserve reads from GGUF files).
// Block-quantized types store `block_elems` consecutive elements of a row in `block_bytes`.
#pragma once

#include <cstdint>

namespace kvs {

enum class WeightType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // 32 elems: f16 d, int8 q[32]                          -> 34 bytes
  kQ4_0,  // 32 elems: f16 d, uint8 qs[16] (lo nibbles = 0..15, hi = 16..31), x = d*(q-8) -> 18
  kQ4_1,  // 32 elems: f16 d, f16 m, uint8 qs[16], x = d*q + m   -> 20 bytes
  kQ4_K,  // 256 elems: f16 d, f16 dmin, uint8 scales[12], uint8 qs[128] -> 144 bytes
  kQ6_K,  // 256 elems: uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d -> 210 bytes
  // 32 elems: f16 d, uint32 qh (bit j = 5th bit of element j), uint8 qs[16] (lo nibbles as
  // Q4_0), x = d * ((nibble | hbit << 4) - 16)                    -> 22 bytes
  kQ5_0,
};

struct WeightTypeInfo {
  WeightType type;
  const char* name;
  uint32_t block_elems;
  uint32_t block_bytes;
};

constexpr WeightTypeInfo kWeightTypeInfos[] = {
    {WeightType::kF32, "F32", 1, 4},       {WeightType::kF16, "F16", 1, 2},
    {WeightType::kBF16, "BF16", 1, 2},     {WeightType::kQ8_0, "Q8_0", 32, 34},
    {WeightType::kQ4_0, "Q4_0", 32, 18},   {WeightType::kQ4_1, "Q4_1", 32, 20},
    {WeightType::kQ4_K, "Q4_K", 256, 144}, {WeightType::kQ6_K, "Q6_K", 256, 210},
    {WeightType::kQ5_0, "Q5_0", 32, 22},
};

constexpr const WeightTypeInfo& weight_type_info(WeightType t) {
  return kWeightTypeInfos[static_cast<int>(t)];
}

// Bytes of one row of `cols` elements (cols must be a multiple of block_elems).
constexpr uint64_t weight_row_bytes(WeightType t, uint64_t cols) {
  const auto& info = weight_type_info(t);
  return cols / info.block_elems * info.block_bytes;
}

}  // namespace kvs
