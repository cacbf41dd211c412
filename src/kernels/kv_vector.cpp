#include "kernels/kv_vector.h"

#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/hadamard_rotation.h"
#include "kernels/scale_fits.h"
#include "kernels/trellis_forward.h"
#include "quant/f16_rows.h"
#include "quant/kv_channel_groups.h"
#include "quant/kv_codecs.h"
#include "quant/kv_lowbit_groups.h"
#include "quant/kv_trellis_groups.h"

namespace kvs {

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
    default: break;
  }
  // Quantized formats: decode the whole vector (scales may be shared across [0, n)), keep
  // [start, n). Only the scalar reference and kernel tails come here.
  float whole[1024];
  std::vector<float> big;
  float* y = whole;
  if (n > 1024) {
    big.resize(n);
    y = big.data();
  }
  switch (dtype) {
    case KvDtype::kFp8E4M3: dequantize_fp8_e4m3(src, n, y); break;
    case KvDtype::kFp8E5M2: dequantize_fp8_e5m2(src, n, y); break;
    case KvDtype::kFp8E4M3Dyn: dequantize_fp8_e4m3_dyn(src, n, y); break;
    case KvDtype::kInt8: dequantize_int8(src, n, y); break;
    case KvDtype::kInt4:
    case KvDtype::kQ4_0: dequantize_q4(src, n, y); break;
    case KvDtype::kQ8_0: dequantize_q8_0(src, n, y); break;
    case KvDtype::kInt4Had:
      dequantize_q4(src, n, y);
      hadamard_rotate(y, n);
      break;
    case KvDtype::kInt3Had:
    case KvDtype::kInt2Had:
      dequantize_lowbit(dtype == KvDtype::kInt3Had ? 3 : 2, src, n, y);
      hadamard_rotate(y, n);
      break;
    case KvDtype::kInt2Had64:
      dequantize_lowbit(2, src, n, y, kLowBitGroup64);
      hadamard_rotate(y, n);
      break;
    case KvDtype::kInt2Tcq64:
      dequantize_trellis(src, n, y);
      hadamard_rotate(y, n);
      break;
    case KvDtype::kInt8Had:
      dequantize_int8(src, n, y);
      hadamard_rotate(y, n);
      break;
    case KvDtype::kQ8_0Had:
      dequantize_q8_0(src, n, y);
      hadamard_rotate(y, n);
      break;
    default: KVS_CHECK_MSG(false, "KV format not supported by the kernels");
  }
  std::memcpy(dst + start, y + start, (n - start) * sizeof(float));
}

void kv_vector_from_f32(KvDtype dtype, const float* src, uint32_t n, uint8_t* dst) {
  switch (dtype) {
    case KvDtype::kF32: std::memcpy(dst, src, n * sizeof(float)); return;
    case KvDtype::kF16: f16_from_f32_rows(src, n, dst); return;
    case KvDtype::kBF16:
      for (uint32_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kFp8E4M3: quantize_fp8_e4m3(src, n, dst); return;
    case KvDtype::kFp8E5M2: quantize_fp8_e5m2(src, n, dst); return;
    case KvDtype::kFp8E4M3Dyn: quantize_fp8_e4m3_dyn(src, n, dst); return;
    case KvDtype::kInt8: quantize_int8(src, n, dst); return;
    case KvDtype::kInt4: quantize_int4_with(src, n, dst, scale_fits); return;
    case KvDtype::kQ4_0: quantize_q4_0(src, n, dst); return;
    case KvDtype::kQ8_0: quantize_q8_0(src, n, dst); return;
    case KvDtype::kInt4Had:
    case KvDtype::kInt3Had:
    case KvDtype::kInt2Had:
    case KvDtype::kInt2Had64:
    case KvDtype::kInt2Tcq64:
    case KvDtype::kInt8Had:
    case KvDtype::kQ8_0Had: {
      float local[1024];
      std::vector<float> big;
      float* r = local;
      if (n > 1024) {
        big.resize(n);
        r = big.data();
      }
      std::memcpy(r, src, n * sizeof(float));
      hadamard_rotate(r, n);
      if (dtype == KvDtype::kInt8Had)
        quantize_int8(r, n, dst);
      else if (dtype == KvDtype::kQ8_0Had)
        quantize_q8_0(r, n, dst);
      else if (dtype == KvDtype::kInt4Had)
        quantize_int4_with(r, n, dst, scale_fits);
      else if (dtype == KvDtype::kInt2Tcq64)
        quantize_trellis_with(r, n, dst, trellis_forward);
      else if (dtype == KvDtype::kInt2Had64)
        quantize_lowbit_with(2, r, n, dst, scale_fits, kLowBitGroup64);
      else
        quantize_lowbit_with(dtype == KvDtype::kInt3Had ? 3 : 2, r, n, dst, scale_fits);
      return;
    }
    case KvDtype::kInt4Chan:
    case KvDtype::kInt3Chan:
    case KvDtype::kInt2Chan:
    case KvDtype::kInt4Chan64:
    case KvDtype::kInt3Chan64:
    case KvDtype::kInt2Chan64:
    case KvDtype::kInt2MixChan64: break;  // a group of tokens, not one vector (kv_write.cpp)
  }
  KVS_CHECK_MSG(false, "KV format not supported by the kernels");
}

uint32_t kv_vector_parts(KvDtype dtype, uint32_t n) {
  return dtype == KvDtype::kInt2Tcq64 ? n / kTrellisGroup : 1;
}

void kv_vector_prepare(KvDtype dtype, const float* src, uint32_t n, float* prepared) {
  std::memcpy(prepared, src, n * sizeof(float));
  if (dtype == KvDtype::kInt2Tcq64) hadamard_rotate(prepared, n);
}

void kv_vector_part_from_prepared(KvDtype dtype, const float* prepared, uint32_t n, uint32_t part,
                                  uint8_t* dst) {
  if (dtype != KvDtype::kInt2Tcq64) {
    KVS_CHECK(part == 0);
    return kv_vector_from_f32(dtype, prepared, n, dst);
  }
  KVS_CHECK(part < n / kTrellisGroup);
  quantize_trellis_with(prepared + part * kTrellisGroup, kTrellisGroup,
                        dst + part * kTrellisGroupBytes, trellis_forward);
}

void kv_key_to_f32(const PagedKvLayout& kv, uint64_t block, uint32_t layer, uint32_t head,
                   uint32_t offset, float* dst) {
  const uint8_t* region = kv.k_head(block, layer, head);
  const ChannelBits bits = channel_bits(kv.k_dtype);
  if (bits.bits == 0) {
    kv_vector_to_f32(kv.k_dtype, region + uint64_t{offset} * kv.k_vector_bytes, kv.head_dim, dst,
                     0);
    return;
  }
  const uint32_t tokens = kv_channel_group_tokens(kv.k_dtype);
  const uint8_t* group =
      region + uint64_t{offset / tokens} * channel_group_bytes(bits, tokens, kv.head_dim);
  dequantize_channel_row(bits, group, offset % tokens, kv.head_dim, dst);
}

}  // namespace kvs
