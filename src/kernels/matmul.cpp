#include "kernels/matmul.h"

#include <vector>

#include "core/check.h"
#include "kernels/dequantize.h"

namespace kvs {

void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  KVS_CHECK(w.row_bytes == weight_row_bytes(w.type, static_cast<uint64_t>(w.cols)));
  std::vector<float> row(static_cast<size_t>(w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t n = 0; n < w.rows; ++n) {
    dequantize_row_reference(w.type, base + n * w.row_bytes, row.data(), w.cols);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * w.cols;
      double s = 0;
      for (int64_t k = 0; k < w.cols; ++k) s += static_cast<double>(row[k]) * xt[k];
      y[t * w.rows + n] = static_cast<float>(s);
    }
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  KVS_CHECK(w.row_bytes == weight_row_bytes(w.type, static_cast<uint64_t>(w.cols)));
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(static_cast<size_t>(w.rows), 32, [&](size_t begin, size_t end, int) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(w.cols));
    for (size_t n = begin; n < end; ++n) {
      dequantize_row(w.type, base + n * w.row_bytes, row.data(), w.cols);
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * w.cols;
        float s = 0;
        for (int64_t k = 0; k < w.cols; ++k) s += row[k] * xt[k];
        y[t * w.rows + static_cast<int64_t>(n)] = s;
      }
    }
  });
}

}  // namespace kvs
