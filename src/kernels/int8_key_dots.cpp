#include "kernels/int8_key_dots.h"

#include <cmath>

#include "kernels/int8_isa.h"

namespace kvs {

float quantize_query_int8(const float* x, uint32_t D, int8_t* q, int32_t* sum) {
  // Plain comparisons and the 1.5 x 2^23 rounding trick (round half to even, exact for |v| below
  // 2^22) instead of libm calls: this runs once per query head and attention item, and the
  // compiler vectorizes both loops.
  float amax = 0.0f;
  for (uint32_t i = 0; i < D; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    amax = a > amax ? a : amax;
  }
  if (!(amax > 0.0f) || !std::isfinite(amax)) {  // all zero (or a non-finite query): zero scores
    for (uint32_t i = 0; i < D; ++i) q[i] = 0;
    *sum = 0;
    return 0.0f;
  }
  const float d = amax / 127.0f;
  const float inv = 127.0f / amax;
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23
  int32_t s = 0;
  for (uint32_t i = 0; i < D; ++i) {
    float r = (x[i] * inv + kRound) - kRound;
    r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
    const int32_t v = static_cast<int32_t>(r);
    q[i] = static_cast<int8_t>(v);
    s += v;
  }
  *sum = s;
  return d;
}

namespace int8_key_dots {

const Kernels* active() {
  switch (int8_isa_active()) {
    case Int8Isa::kAvx512Vnni: return &kernels_avx512vnni();
    case Int8Isa::kAvxVnni: return &kernels_avxvnni();
    case Int8Isa::kAvx2:
    case Int8Isa::kNone: return nullptr;
  }
  return nullptr;
}

}  // namespace int8_key_dots
}  // namespace kvs
