// WeightMatrix: a weight tensor as the matmul kernels read it (type, rows of quantized blocks).
// Its own header so that the matmul paths (the int8 GEMM, Highway) depend on it, not on matmul().
#pragma once

#include <cstdint>

#include "core/weight_type.h"

namespace kvs {

struct WeightMatrix {
  WeightType type;
  const void* data;    // rows x row_bytes, row-major; each row = cols elements in blocks
  int64_t rows;        // output features N
  int64_t cols;        // input features K (multiple of the block size)
  uint64_t row_bytes;  // weight_row_bytes(type, cols)
  // The same rows packed at load (kernels/packed_weights.h), or null: the integer path then packs
  // each group of rows as it goes. `data` stays valid either way (the other paths read it).
  const uint8_t* packed = nullptr;
};

// One weight of a matmul_group (kernels/matmul.h) and where its product goes: Y = X * W^T,
// [T][w.rows].
struct MatmulOutput {
  const WeightMatrix* w;
  float* y;
};

}  // namespace kvs
