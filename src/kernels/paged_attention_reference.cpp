// The scalar reference of paged attention (kernels/paged_attention.h): the test oracle, in
// double precision with plain loops, reading K/V through the block tables as the kernel does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "kernels/int8_key_dots.h"
#include "kernels/kv_vector.h"
#include "kernels/paged_attention.h"
#include "quant/hadamard.h"
#include "quant/key_tails.h"
#include "quant/kv_channel_groups.h"
#include "quant/kv_codecs.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

// q . k for a sealed key of a per-channel format scored in integers (4-bit codes and int2mix's,
// kernels/attention_channel_keys-inl.h): the group's qs = q x step quantized to int8,
// sum q min + o sum qs + d sum qi (code - o), with o = 8 for 4-bit codes and 0 for int2mix's.
double int_channel_key_dot(const PagedKvLayout& kv, uint32_t blk, uint32_t layer, uint32_t kvh,
                           int32_t j, const float* q) {
  const uint32_t D = kv.head_dim;
  const uint32_t G = kv_channel_group_tokens(kv.k_dtype);
  const ChannelBits code = channel_bits(kv.k_dtype);
  const double offset = code.bits == 4 ? 8.0 : 0.0;
  const uint8_t* group = kv.k_head(blk, layer, kvh) +
                         uint64_t(j / G * G % kv.block_size / G) * channel_group_bytes(code, G, D);
  const uint8_t* mins = channel_group_minimums(group);
  const uint8_t* steps = channel_group_steps(group, D);
  std::vector<float> qs(D), codes(D);
  std::vector<int8_t> qi(D);
  double d = 0;
  for (uint32_t i = 0; i < D; ++i) {
    uint16_t m16, s16;
    std::memcpy(&m16, mins + 2 * i, 2);
    std::memcpy(&s16, steps + 2 * i, 2);
    qs[i] = q[i] * f16_to_f32(s16 & 0x7FFFu);
    d += double(q[i]) * f16_to_f32(m16) + offset * qs[i];
  }
  int32_t qsum = 0;
  const float dq = quantize_query_int8(qs.data(), D, qi.data(), &qsum);
  channel_row_codes(code, group, uint32_t(j) % G, D, codes.data());
  double isum = 0;
  for (uint32_t i = 0; i < D; ++i) isum += double(qi[i]) * (double(codes[i]) - offset);
  return d + double(dq) * isum;
}

}  // namespace

void paged_attention_reference(const PagedAttentionArgs& a) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const uint32_t group = a.num_heads / kv.kv_heads;
  std::vector<float> k(D), v(D);
  std::vector<int8_t> q8(D);
  std::vector<float> turned(D);  // int8_had: the query rotated before it is quantized
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t n = a.context_len[t];
    const int32_t j0 = a.window == 0 ? 0 : std::max<int32_t>(0, n - int32_t(a.window));
    // The recent-token window (quant/recent_window.h): positions from jr on are read in f16.
    const int32_t jr = kv.recent == nullptr ? n : std::max(j0, kv.recent->first_position(t, n));
    // The attention sink (quant/attention_sink.h): position 0 too.
    const bool sink = kv.recent != nullptr && kv.recent->reads_sink(t, j0, n);
    auto exact = [&](int32_t j) { return j >= jr || (sink && j == 0); };
    for (uint32_t h = 0; h < a.num_heads; ++h) {
      const uint32_t kvh = h / group;
      const float* q = a.q + (t * a.num_heads + h) * D;
      std::vector<double> sc(n - j0);
      double m = -INFINITY;
      // int8 K is scored against the query quantized to int8 (kernels/int8_key_dots.h); int8_had
      // K against the rotated query quantized to int8 (both in the rotated space).
      const bool k_int8 = kv_dtype_int8_keys(kv.k_dtype);
      const float* q_int8 = q;
      if (kv.k_dtype == KvDtype::kInt8Had) {
        std::copy(q, q + D, turned.begin());
        hadamard_inplace(turned.data(), D);
        q_int8 = turned.data();
      }
      int32_t qsum = 0;
      const float dq = k_int8 ? quantize_query_int8(q_int8, D, q8.data(), &qsum) : 0.0f;
      for (int32_t j = j0; j < n; ++j) {
        const uint32_t blk = a.block_table[t][j / kv.block_size];
        const uint8_t* kp = kv.k_head(blk, a.layer, kvh) + (j % kv.block_size) * kv.k_vector_bytes;
        double d = 0;
        if (exact(j)) {
          window_row_to_f32(kv.recent->key(t, a.model_layer, kvh, j), D, k.data());
          for (uint32_t i = 0; i < D; ++i) d += double(q[i]) * k[i];
        } else if (k_int8) {
          int64_t isum = 0;
          for (uint32_t i = 0; i < D; ++i) isum += int64_t{q8[i]} * static_cast<int8_t>(kp[i]);
          d = double(isum) * dq * load_f16_scale(kp + D);
        } else {
          kv_key_to_f32(kv, blk, a.layer, kvh, j % kv.block_size, k.data());
          // Per-channel keys: the query's own group in f16 (quant/key_tails.h).
          const int32_t G = static_cast<int32_t>(std::max(1u, kv_channel_group_tokens(kv.k_dtype)));
          const int32_t own_start = (n - 1) / G * G;
          const uint16_t* own = nullptr;
          if (kv_dtype_per_channel(kv.k_dtype) && j >= own_start && kv.key_tails != nullptr) {
            own = kv.key_tails->step_key(blk, j % kv.block_size, kv.block_size, kvh);
            if (own != nullptr)
              for (uint32_t i = 0; i < D; ++i) k[i] = f16_to_f32(own[i]);
          }
          if (own == nullptr && kv_dtype_per_channel(kv.k_dtype) &&
              int8_key_dots::channel_keys_in_int8(channel_bits(kv.k_dtype))) {
            d = int_channel_key_dot(kv, blk, a.layer, kvh, j, q);
          } else {
            for (uint32_t i = 0; i < D; ++i) d += double(q[i]) * k[i];
          }
        }
        sc[j - j0] = d * a.scale;
        m = std::max(m, sc[j - j0]);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - m));
      std::vector<double> acc(D, 0.0);
      for (int32_t j = j0; j < n; ++j) {
        const uint32_t blk = a.block_table[t][j / kv.block_size];
        if (exact(j)) {
          window_row_to_f32(kv.recent->value(t, a.model_layer, kvh, j), D, v.data());
        } else {
          kv_vector_to_f32(kv.v_dtype,
                           kv.v_head(blk, a.layer, kvh) + (j % kv.block_size) * kv.v_vector_bytes,
                           D, v.data(), 0);
        }
        for (uint32_t i = 0; i < D; ++i) acc[i] += sc[j - j0] / sum * v[i];
      }
      float* o = a.out + (t * a.num_heads + h) * D;
      for (uint32_t i = 0; i < D; ++i) o[i] = static_cast<float>(acc[i]);
    }
  }
}

}  // namespace kvs
