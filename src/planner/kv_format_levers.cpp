#include "planner/kv_format_levers.h"

#include <string>

namespace kvs {
namespace {

// A byte or less per element: the 8-bit formats and every grouped (block) format.
bool at_most_a_byte(KvDtype d) {
  return kv_dtype_info(d).group_elems != 0 || kv_dtype_info(d).elem_bits <= 8;
}

// The lever storing K as lever_k and V as lever_v, not applicable when they are stored so
// already ("already int4", "already int2_chan/int2_had"), or when lever_k quantizes keys per
// channel over groups that the pool's blocks do not hold whole.
KvFormatLever lever(const char* name, KvDtype k, KvDtype v, KvDtype lever_k, KvDtype lever_v,
                    uint32_t block_size) {
  std::string why_not;
  const uint32_t group = kv_channel_group_tokens(lever_k);
  if (k == lever_k && v == lever_v)
    why_not = std::string("already ") + kv_dtype_name(lever_k) +
              (lever_k == lever_v ? "" : std::string("/") + kv_dtype_name(lever_v));
  else if (group != 0 && block_size % group != 0)
    why_not = "--block-size must be a multiple of " + std::to_string(group) + " (it is " +
              std::to_string(block_size) + ")";
  return {.name = name, .k_dtype = lever_k, .v_dtype = lever_v, .why_not = why_not};
}

}  // namespace

std::vector<KvFormatLever> kv_format_levers(KvDtype k, KvDtype v, uint32_t block_size) {
  std::vector<KvFormatLever> out;
  KvFormatLever fp8 =
      lever("KV fp8 (e4m3)", k, v, KvDtype::kFp8E4M3, KvDtype::kFp8E4M3, block_size);
  if (fp8.why_not.empty() && at_most_a_byte(k) && at_most_a_byte(v))
    fp8.why_not = "KV is already 8 bits or less";
  out.push_back(std::move(fp8));
  const struct {
    const char* name;
    KvDtype k, v;
  } kLevers[] = {
      {"KV int4 (+f16 scale/32)", KvDtype::kInt4, KvDtype::kInt4},
      {"KV 4-bit, K per channel", KvDtype::kInt4Chan, KvDtype::kInt4Had},
      {"KV 3-bit, K per channel", KvDtype::kInt3Chan, KvDtype::kInt3Had},
      {"KV 2-bit, K per channel", KvDtype::kInt2Chan, KvDtype::kInt2Had},
      {"KV 4-bit, K per channel /64", KvDtype::kInt4Chan64, KvDtype::kInt4Had},
      {"KV 2-bit /64, widest K channels 3-bit", KvDtype::kInt2MixChan64, KvDtype::kInt2Had64},
      // The same bytes as the lever above, its values trellis-coded: less error, slower writes.
      {"KV 2-bit /64, trellis-coded V", KvDtype::kInt2MixChan64, KvDtype::kInt2Tcq64},
  };
  for (const auto& l : kLevers) out.push_back(lever(l.name, k, v, l.k, l.v, block_size));
  return out;
}

}  // namespace kvs
