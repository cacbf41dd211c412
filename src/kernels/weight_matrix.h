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
};

// One weight of a matmul_group (kernels/matmul.h) and where its product goes: Y = X * W^T,
// [T][w.rows].
struct MatmulOutput {
  const WeightMatrix* w;
  float* y;
};

}  // namespace kvs
