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

}  // namespace

std::vector<KvFormatLever> kv_format_levers(KvDtype k, KvDtype v) {
  std::vector<KvFormatLever> out;
  KvFormatLever fp8{.name = "KV fp8 (e4m3)",
                    .dtype = KvDtype::kFp8E4M3,
                    .why_not = already(k, v, KvDtype::kFp8E4M3)};
  if (fp8.why_not.empty() && at_most_a_byte(k) && at_most_a_byte(v))
    fp8.why_not = "KV is already 8 bits or less";
  out.push_back(std::move(fp8));
  out.push_back({.name = "KV int4 (+f16 scale/32)",
                 .dtype = KvDtype::kInt4,
                 .why_not = already(k, v, KvDtype::kInt4)});
  return out;
}

}  // namespace kvs
