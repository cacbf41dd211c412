#include "planner/kv_format_levers.h"

namespace kvs {
namespace {

// A byte or less per element: the 8-bit formats and every grouped (block) format.
bool at_most_a_byte(KvDtype d) {
  return kv_dtype_info(d).group_elems != 0 || kv_dtype_info(d).elem_bits <= 8;
}

std::string already(KvDtype k, KvDtype v, KvDtype target) {
  return k == target && v == target ? std::string("already ") + kv_dtype_name(target) : "";
}

KvFormatLever per_channel(const char* name, KvDtype k, KvDtype v, KvDtype lever_k,
                          KvDtype lever_v) {
  std::string why_not;
  if (k == lever_k && v == lever_v)
    why_not = std::string("already ") + kv_dtype_name(lever_k) + "/" + kv_dtype_name(lever_v);
  return {.name = name, .k_dtype = lever_k, .v_dtype = lever_v, .why_not = why_not};
}

}  // namespace

std::vector<KvFormatLever> kv_format_levers(KvDtype k, KvDtype v) {
  std::vector<KvFormatLever> out;
  KvFormatLever fp8{.name = "KV fp8 (e4m3)",
                    .k_dtype = KvDtype::kFp8E4M3,
                    .v_dtype = KvDtype::kFp8E4M3,
                    .why_not = already(k, v, KvDtype::kFp8E4M3)};
  if (fp8.why_not.empty() && at_most_a_byte(k) && at_most_a_byte(v))
    fp8.why_not = "KV is already 8 bits or less";
  out.push_back(std::move(fp8));
  out.push_back({.name = "KV int4 (+f16 scale/32)",
                 .k_dtype = KvDtype::kInt4,
                 .v_dtype = KvDtype::kInt4,
                 .why_not = already(k, v, KvDtype::kInt4)});
  out.push_back(
      per_channel("KV 4-bit, K per channel", k, v, KvDtype::kInt4Chan, KvDtype::kInt4Had));
  out.push_back(
      per_channel("KV 3-bit, K per channel", k, v, KvDtype::kInt3Chan, KvDtype::kInt3Had));
  out.push_back(
      per_channel("KV 2-bit, K per channel", k, v, KvDtype::kInt2Chan, KvDtype::kInt2Had));
  return out;
}

}  // namespace kvs
