// kv_format_levers: THE rule for the serving levers that change the KV format or the context,
// shared by `kvserve plan` (plan_levers.h, which re-plans the whole GPU) and the dashboard's
// capacity line (server/capacity_line.h, which re-plans the engine's pool): which formats are
// offered, what each lever is called, when one does not apply and why, and what "half the
// context" is. Each caller prices the lever its own way; what is offered is decided here once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/kv_format.h"

namespace kvs {

struct KvFormatLever {
  std::string name;     // "KV fp8 (e4m3)"
  KvDtype k_dtype;      // the lever stores K in this format
  KvDtype v_dtype;      // and V in this one
  std::string why_not;  // empty when the lever applies: "already int4"
};

// The KV-format levers, in order, for K and V stored as `k` and `v`:
//   KV fp8 (e4m3)            K and V fp8_e4m3, unless they are both fp8_e4m3 already ("already
//                            fp8_e4m3") or both take a byte or less per element ("KV is already
//                            8 bits or less": fp8 would not shrink them);
//   KV int4 (+f16 scale/32)  K and V int4, unless both are int4 already ("already int4");
//   KV 4-bit, K per channel  K int4_chan, V int4_had;
//   KV 3-bit, K per channel  K int3_chan, V int3_had;
//   KV 2-bit, K per channel  K int2_chan, V int2_had;
//   KV 4-bit, K per channel /64  K int4_chan64, V int4_had (int4_had's bytes);
// each of the last five unless K and V are those already ("already int2_chan/int2_had"), and
// the per-channel ones only where `block_size` holds their groups of 16 or 64 tokens whole
// ("--block-size must be a multiple of 64 (it is 16)"; 0, no paging, holds any).
[[nodiscard]] std::vector<KvFormatLever> kv_format_levers(KvDtype k, KvDtype v,
                                                          uint32_t block_size);

// The "half the context" lever: its name and the context it plans for, max(1, context / 2).
inline constexpr const char* kHalfContextLever = "half the context";
[[nodiscard]] inline uint64_t half_context(uint64_t context) {
  return context / 2 > 0 ? context / 2 : 1;
}

}  // namespace kvs
