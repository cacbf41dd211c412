// KV element codecs: how one head vector of K or V (n floats) is quantized once when it is
// written into the cache, and how it reads back. Each format is a traits struct (its byte
// layout, which the attention kernels read directly, converting in registers) plus scalar
// quantize/dequantize functions (the reference the kernels and the tests compare against).
//
// Layouts (n = head dim; "f16" = IEEE binary16, little endian):
//   Fp8 (e4m3, e5m2)   [n x fp8]                 per-tensor scale 1.0 (fp8.h saturates)
//   Fp8Dyn (e4m3)      [n x fp8][f16 s]          s = amax / 448 per vector (per token, head)
//   Int8               [n x int8][f16 s]         s = amax / 127 per vector, q in [-127, 127]
//   Group q4 (int4, q4_0), per 32 elements:
//                      [f16 d][16 bytes]         byte j: element j (low nibble), j+16 (high);
//                                                value = d * (nibble - 8)
//   Group q8 (q8_0), per 32 elements:
//                      [f16 d][32 x int8]        value = d * q
// int4 and q4_0 share the layout and the reader; they differ in how d is chosen: q4_0 follows
// llama.cpp (d = m / -8, m the element of largest magnitude), int4 picks among a few
// candidate scales (and their least-squares refits) the one with the smallest squared error
// of the group (never worse than q4_0's choice on the same group).
//
// Stated per-element error bounds (amax = max |x| of the vector or group, finite inputs):
//   int8:        |x - y| <= amax / 254 * (1 + 2^-9)
//   fp8 dyn:     |x - y| <= |x| / 16 + amax / 448 * 2^-10 (scaled e4m3, see fp8.h)
//   q4_0:        |x - y| <= amax / 8 * (1 + 2^-9)
//   int4:        |x - y| <= amax / 4, and the group's squared error <= q4_0's on the same data
//   q8_0:        |x - y| <= amax / 254 * (1 + 2^-9)
// plus 2^-18 absolute in every case (a scale below f16's normal range is rounded coarsely).
// A scale that would overflow f16 (amax > 127 * 65504 for int8) is clamped to the largest f16,
// so such elements saturate; NaN inputs are stored as 0 and +-inf as +-the largest value, so
// a quantized vector never decodes to NaN or Inf.
#pragma once

#include <cstdint>

#include "quant/scale_fits.h"

namespace kvs {

struct Fp8Traits {
  static constexpr uint32_t kScaleBytes = 0;
};
struct Fp8DynTraits {
  static constexpr uint32_t kScaleBytes = 2;  // after the n bytes
  static constexpr float kQMax = 448.0f;
};
struct Int8Traits {
  static constexpr uint32_t kScaleBytes = 2;  // after the n bytes
  static constexpr float kQMax = 127.0f;
};
struct GroupQ4Traits {
  static constexpr uint32_t kGroup = 32;
  static constexpr uint32_t kGroupBytes = 18;
  static constexpr uint32_t kDataOffset = 2;  // after the f16 d
};
struct GroupQ8Traits {
  static constexpr uint32_t kGroup = 32;
  static constexpr uint32_t kGroupBytes = 34;
  static constexpr uint32_t kDataOffset = 2;
};

// ---- fp8, per-tensor scale 1.0 ----------------------------------------------------------------
void quantize_fp8_e4m3(const float* x, uint32_t n, uint8_t* dst);
void quantize_fp8_e5m2(const float* x, uint32_t n, uint8_t* dst);
void dequantize_fp8_e4m3(const uint8_t* src, uint32_t n, float* y);
void dequantize_fp8_e5m2(const uint8_t* src, uint32_t n, float* y);

// ---- fp8 e4m3 with a dynamic per-vector scale (n + 2 bytes) -----------------------------------
void quantize_fp8_e4m3_dyn(const float* x, uint32_t n, uint8_t* dst);
void dequantize_fp8_e4m3_dyn(const uint8_t* src, uint32_t n, float* y);

// ---- int8 with one f16 scale per vector (n + 2 bytes) -----------------------------------------
void quantize_int8(const float* x, uint32_t n, uint8_t* dst);
void dequantize_int8(const uint8_t* src, uint32_t n, float* y);

// ---- groups of 32 (n % 32 == 0) ---------------------------------------------------------------
void quantize_int4(const float* x, uint32_t n, uint8_t* dst);  // searched scale
// The same bytes, with the candidates' fits computed by `fits` (kernels/scale_fits.h in lanes).
void quantize_int4_with(const float* x, uint32_t n, uint8_t* dst, ScaleFitsFn fits);
void quantize_q4_0(const float* x, uint32_t n, uint8_t* dst);  // llama.cpp's choice of d
void dequantize_q4(const uint8_t* src, uint32_t n, float* y);  // int4 and q4_0
void quantize_q8_0(const float* x, uint32_t n, uint8_t* dst);
void dequantize_q8_0(const uint8_t* src, uint32_t n, float* y);

// The scale stored at p (f16) as f32.
[[nodiscard]] float load_f16_scale(const uint8_t* p);

}  // namespace kvs
