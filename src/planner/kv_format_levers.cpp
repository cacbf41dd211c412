#include "planner/kv_format_levers.h"

#include <string>

namespace kvs {
namespace {

// A byte or less per element: the 8-bit formats and every grouped (block) format.
bool at_most_a_byte(KvDtype d) {
  return kv_dtype_info(d).group_elems != 0 || kv_dtype_info(d).elem_bits <= 8;
}

// The lever storing K as lever_k and V as lever_v, not applicable when they are stored so
// already ("already int4", "already int2_chan/int2_had").
KvFormatLever lever(const char* name, KvDtype k, KvDtype v, KvDtype lever_k, KvDtype lever_v) {
  std::string why_not;
  if (k == lever_k && v == lever_v)
    why_not = std::string("already ") + kv_dtype_name(lever_k) +
              (lever_k == lever_v ? "" : std::string("/") + kv_dtype_name(lever_v));
  return {.name = name, .k_dtype = lever_k, .v_dtype = lever_v, .why_not = why_not};
}

}  // namespace

std::vector<KvFormatLever> kv_format_levers(KvDtype k, KvDtype v, uint32_t block_size) {
  std::vector<KvFormatLever> out;
  KvFormatLever fp8 = lever("KV fp8 (e4m3)", k, v, KvDtype::kFp8E4M3, KvDtype::kFp8E4M3);
  if (fp8.why_not.empty() && at_most_a_byte(k) && at_most_a_byte(v))
    fp8.why_not = "KV is already 8 bits or less";
  out.push_back(std::move(fp8));
  out.push_back(lever("KV int4 (+f16 scale/32)", k, v, KvDtype::kInt4, KvDtype::kInt4));
  out.push_back(lever("KV 4-bit, K per channel", k, v, KvDtype::kInt4Chan, KvDtype::kInt4Had));
  out.push_back(lever("KV 3-bit, K per channel", k, v, KvDtype::kInt3Chan, KvDtype::kInt3Had));
  out.push_back(lever("KV 2-bit, K per channel", k, v, KvDtype::kInt2Chan, KvDtype::kInt2Had));
  KvFormatLever wide =
      lever("KV 4-bit, K per channel /64", k, v, KvDtype::kInt4Chan64, KvDtype::kInt4Had);
  const uint32_t group = kv_channel_group_tokens(KvDtype::kInt4Chan64);
  if (wide.why_not.empty() && block_size % group != 0)
    wide.why_not = "needs --block-size a multiple of " + std::to_string(group) + " (it is " +
                   std::to_string(block_size) + ")";
  out.push_back(std::move(wide));
  return out;
}

}  // namespace kvs
