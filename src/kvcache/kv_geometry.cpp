#include "kvcache/kv_geometry.h"

#include "core/byte_size.h"

namespace kvs {

static std::string bytes_per_elem_text(KvDtype dtype, uint32_t dim) {
  const KvDtypeInfo& info = kv_dtype_info(dtype);
  if (info.group_elems == 0 && info.vector_scale_bytes == 0 && info.elem_bits % 8 == 0)
    return std::to_string(info.elem_bits / 8);
  // Formats with scales: bytes per element as the exact fraction vector_bytes / dim.
  return "(" + std::to_string(kv_vector_bytes(dtype, dim)) + "/" + std::to_string(dim) + ")";
}

KvTokenBytes kv_token_bytes(const KvUniformShape& s) {
  KvTokenBytes out;
  out.k_bytes_per_layer = uint64_t{s.kv_heads} * kv_vector_bytes(s.k_dtype, s.head_dim_k);
  out.v_bytes_per_layer = uint64_t{s.kv_heads} * kv_vector_bytes(s.v_dtype, s.head_dim_v);
  out.bytes_per_token = uint64_t{s.layers} * (out.k_bytes_per_layer + out.v_bytes_per_layer);
  if (s.k_dtype == s.v_dtype && s.head_dim_k == s.head_dim_v) {
    out.formula = std::to_string(s.layers) + " x 2 x " + std::to_string(s.kv_heads) + " x " +
                  std::to_string(s.head_dim_k) + " x " + bytes_per_elem_text(s.k_dtype, s.head_dim_k) +
                  " = " + format_thousands(out.bytes_per_token) + " B";
  } else {
    out.formula = std::to_string(s.layers) + " x " + std::to_string(s.kv_heads) + " x (" +
                  std::to_string(s.head_dim_k) + " x " + bytes_per_elem_text(s.k_dtype, s.head_dim_k) +
                  " + " + std::to_string(s.head_dim_v) + " x " +
                  bytes_per_elem_text(s.v_dtype, s.head_dim_v) + ") = " +
                  format_thousands(out.bytes_per_token) + " B";
  }
  return out;
}

}  // namespace kvs
