#include "kernels/kv_vector.h"

#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace kvs {

bool kv_dtype_supported_by_kernels(KvDtype dtype) {
  return dtype == KvDtype::kF32 || dtype == KvDtype::kF16 || dtype == KvDtype::kBF16;
}

void kv_vector_to_f32(KvDtype dtype, const uint8_t* src, uint32_t n, float* dst, uint32_t start) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst + start, src + start * 4, (n - start) * sizeof(float));
      return;
    case KvDtype::kF16:
      for (uint32_t i = start; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case KvDtype::kBF16:
      for (uint32_t i = start; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    default: KVS_CHECK_MSG(false, "KV format not supported by the kernels");
  }
}

void kv_vector_from_f32(KvDtype dtype, const float* src, uint32_t n, uint8_t* dst) {
  switch (dtype) {
    case KvDtype::kF32: std::memcpy(dst, src, n * sizeof(float)); return;
    case KvDtype::kF16:
      for (uint32_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kBF16:
      for (uint32_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default: KVS_CHECK_MSG(false, "KV format not supported by the kernels");
  }
}

}  // namespace kvs
