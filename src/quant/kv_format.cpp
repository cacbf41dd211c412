#include "quant/kv_format.h"

#include <algorithm>
#include <array>
#include <string>

#include "quant/kv_codecs.h"
#include "quant/kv_lowbit_groups.h"
#include "quant/kv_trellis_groups.h"

namespace kvs {
namespace {

constexpr std::array<KvDtypeInfo, kNumKvDtypes> kTable = {{
    {KvDtype::kF32, "f32", 0, 0, 32, 0, "none"},
    {KvDtype::kF16, "f16", 0, 0, 16, 0, "none"},
    {KvDtype::kBF16, "bf16", 0, 0, 16, 0, "none"},
    {KvDtype::kFp8E4M3, "fp8_e4m3", 0, 0, 8, 0, "per-tensor scale (no per-token bytes)"},
    {KvDtype::kFp8E5M2, "fp8_e5m2", 0, 0, 8, 0, "per-tensor scale (no per-token bytes)"},
    {KvDtype::kInt8, "int8", 0, 0, 8, 2, "one f16 scale per token per head"},
    {KvDtype::kInt4, "int4", 32, 18, 0, 0, "one f16 scale per 32 elements"},
    {KvDtype::kQ8_0, "q8_0", 32, 34, 0, 0, "llama.cpp block: f16 scale + 32 x int8"},
    {KvDtype::kQ4_0, "q4_0", 32, 18, 0, 0, "llama.cpp block: f16 scale + 32 x 4 bit"},
    {KvDtype::kFp8E4M3Dyn, "fp8_e4m3_dyn", 0, 0, 8, 2,
     "one f16 scale per token per head (amax / 448)"},
    {KvDtype::kInt4Had, "int4_had", 32, 18, 0, 0,
     "one f16 scale per 32 elements of the Hadamard-rotated vector"},
    {KvDtype::kInt4Chan, "int4_chan", 0, 0, 4, 0,
     "keys only: f16 minimum and step per channel per 16 tokens", kChannelGroupTokens},
    {KvDtype::kInt3Chan, "int3_chan", 0, 0, 3, 0,
     "keys only: f16 minimum and step per channel per 16 tokens", kChannelGroupTokens},
    {KvDtype::kInt2Chan, "int2_chan", 0, 0, 2, 0,
     "keys only: f16 minimum and step per channel per 16 tokens", kChannelGroupTokens},
    {KvDtype::kInt3Had, "int3_had", 32, 14, 0, 0,
     "one f16 scale per 32 elements of the Hadamard-rotated vector"},
    {KvDtype::kInt2Had, "int2_had", 32, 10, 0, 0,
     "one f16 scale per 32 elements of the Hadamard-rotated vector"},
    {KvDtype::kInt4Chan64, "int4_chan64", 0, 0, 4, 0,
     "keys only: f16 minimum and step per channel per 64 tokens", kMaxChannelGroupTokens},
    {KvDtype::kInt3Chan64, "int3_chan64", 0, 0, 3, 0,
     "keys only: f16 minimum and step per channel per 64 tokens", kMaxChannelGroupTokens},
    {KvDtype::kInt2Chan64, "int2_chan64", 0, 0, 2, 0,
     "keys only: f16 minimum and step per channel per 64 tokens", kMaxChannelGroupTokens},
    {KvDtype::kInt8Had, "int8_had", 0, 0, 8, 2,
     "one f16 scale per token per head of the Hadamard-rotated vector"},
    {KvDtype::kInt2Had64, "int2_had64", 64, 18, 0, 0,
     "one f16 scale per 64 elements of the Hadamard-rotated vector"},
    {KvDtype::kInt2MixChan64, "int2mix_chan64", 0, 0, 2, 0,
     "keys only: f16 minimum and step per channel per 64 tokens, the widest quarter at 3 bits",
     kMaxChannelGroupTokens},
    {KvDtype::kInt2Tcq64, "int2_tcq64", 64, 18, 0, 0,
     "one f16 scale per 64 elements of the Hadamard-rotated vector, trellis-coded"},
    {KvDtype::kQ8_0Had, "q8_0_had", 32, 34, 0, 0,
     "llama.cpp's q8_0 block of the Hadamard-rotated vector"},
}};

// Row i is the format whose value is i: kv_dtype_from_code and all_kv_dtypes rely on it.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].dtype) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kTable must list every KvDtype once, in enum order");

constexpr std::array<KvDtype, kNumKvDtypes> all_dtypes() {
  std::array<KvDtype, kNumKvDtypes> out{};
  for (size_t i = 0; i < kTable.size(); ++i) out[i] = kTable[i].dtype;
  return out;
}
constexpr std::array<KvDtype, kNumKvDtypes> kAllDtypes = all_dtypes();

// The byte sizes above are the codecs' layouts (kv_codecs.h): one table, tied to the traits the
// kernels read, so the pool's sizing and the bytes the codecs write cannot drift apart.
constexpr const KvDtypeInfo& info_of(KvDtype d) {
  for (const KvDtypeInfo& i : kTable)
    if (i.dtype == d) return i;
  return kTable[0];
}
static_assert(info_of(KvDtype::kInt4).group_elems == GroupQ4Traits::kGroup &&
              info_of(KvDtype::kInt4).group_bytes == GroupQ4Traits::kGroupBytes);
static_assert(info_of(KvDtype::kQ4_0).group_elems == GroupQ4Traits::kGroup &&
              info_of(KvDtype::kQ4_0).group_bytes == GroupQ4Traits::kGroupBytes);
static_assert(info_of(KvDtype::kInt4Had).group_elems == GroupQ4Traits::kGroup &&
              info_of(KvDtype::kInt4Had).group_bytes == GroupQ4Traits::kGroupBytes);
static_assert(info_of(KvDtype::kInt3Had).group_elems == kLowBitGroup &&
              info_of(KvDtype::kInt3Had).group_bytes == lowbit_group_bytes(3));
static_assert(info_of(KvDtype::kInt2Had).group_elems == kLowBitGroup &&
              info_of(KvDtype::kInt2Had).group_bytes == lowbit_group_bytes(2));
static_assert(info_of(KvDtype::kInt2Had64).group_elems == kLowBitGroup64 &&
              info_of(KvDtype::kInt2Had64).group_bytes == lowbit_group_bytes(2, kLowBitGroup64));
static_assert(info_of(KvDtype::kInt2Tcq64).group_elems == kTrellisGroup &&
              info_of(KvDtype::kInt2Tcq64).group_bytes == kTrellisGroupBytes);
static_assert(info_of(KvDtype::kQ8_0).group_elems == GroupQ8Traits::kGroup &&
              info_of(KvDtype::kQ8_0).group_bytes == GroupQ8Traits::kGroupBytes);
static_assert(info_of(KvDtype::kQ8_0Had).group_elems == GroupQ8Traits::kGroup &&
              info_of(KvDtype::kQ8_0Had).group_bytes == GroupQ8Traits::kGroupBytes);
static_assert(info_of(KvDtype::kInt8).elem_bits == 8 &&
              info_of(KvDtype::kInt8).vector_scale_bytes == Int8Traits::kScaleBytes);
static_assert(info_of(KvDtype::kInt8Had).elem_bits == 8 &&
              info_of(KvDtype::kInt8Had).vector_scale_bytes == Int8Traits::kScaleBytes);
static_assert(info_of(KvDtype::kFp8E4M3Dyn).elem_bits == 8 &&
              info_of(KvDtype::kFp8E4M3Dyn).vector_scale_bytes == Fp8DynTraits::kScaleBytes);
static_assert(info_of(KvDtype::kFp8E4M3).vector_scale_bytes == Fp8Traits::kScaleBytes &&
              info_of(KvDtype::kFp8E5M2).vector_scale_bytes == Fp8Traits::kScaleBytes);

}  // namespace

bool kv_dtype_per_channel(KvDtype dtype) { return kv_dtype_info(dtype).channel_group_tokens != 0; }

uint32_t kv_channel_group_tokens(KvDtype dtype) {
  return kv_dtype_info(dtype).channel_group_tokens;
}

const KvDtypeInfo& kv_dtype_info(KvDtype dtype) {
  // Row i is the format whose value is i (rows_in_enum_order): per-group callers (the attention
  // kernel, the writer) look formats up without a scan.
  const auto i = static_cast<size_t>(dtype);
  KVS_CHECK_MSG(i < kTable.size(), "unknown KvDtype");
  return kTable[i];
}

std::span<const KvDtype, kNumKvDtypes> all_kv_dtypes() { return kAllDtypes; }

std::optional<KvDtype> kv_dtype_from_code(uint64_t code) {
  if (code >= kTable.size()) return std::nullopt;
  return kTable[code].dtype;
}

const char* kv_dtype_name(KvDtype dtype) { return kv_dtype_info(dtype).name; }

Result<KvDtype> parse_kv_dtype(std::string_view name) {
  for (const auto& info : kTable)
    if (name == info.name) return info.dtype;
  if (name == "fp16" || name == "float16" || name == "half") return KvDtype::kF16;
  if (name == "float32" || name == "float" || name == "fp32") return KvDtype::kF32;
  if (name == "bfloat16") return KvDtype::kBF16;
  if (name == "fp8" || name == "fp8_e4m3fn") return KvDtype::kFp8E4M3;
  if (name == "fp8_dyn") return KvDtype::kFp8E4M3Dyn;
  std::string all;
  for (const auto& info : kTable) {
    if (!all.empty()) all += ", ";
    all += info.name;
  }
  return invalid_argument("unknown KV cache dtype '" + std::string(name) + "' (expected one of " +
                          all + ", fp8)");
}

uint64_t kv_vector_bytes(KvDtype dtype, uint64_t dim) {
  const KvDtypeInfo& info = kv_dtype_info(dtype);
  if (info.group_elems != 0) {
    const uint64_t groups = (dim + info.group_elems - 1) / info.group_elems;
    return groups * info.group_bytes;
  }
  // Per channel: the codes, plus 4 bytes per channel (f16 minimum and step) shared by a group.
  // The wide channels (a quarter) add one bit each.
  if (info.channel_group_tokens != 0)
    return (dim * info.elem_bits + 7) / 8 + (kv_dtype_wide_channels(dtype) ? dim / 32 : 0) +
           dim * 4 / info.channel_group_tokens;
  return (dim * info.elem_bits + 7) / 8 + info.vector_scale_bytes;
}

Result<uint64_t> kv_vector_bytes_checked(KvDtype dtype, uint64_t dim) {
  const KvDtypeInfo& info = kv_dtype_info(dtype);
  if (dim == 0) return invalid_argument("head dimension must be positive");
  if (info.group_elems != 0 && dim % info.group_elems != 0)
    return invalid_argument(std::string("KV format ") + info.name +
                            " needs a head dimension that is a multiple of " +
                            std::to_string(info.group_elems) + ", got " + std::to_string(dim));
  // q4_0-ordered 4-bit rows; and 4 parameter bytes per channel that divide by the group's tokens.
  // The wide channels' bits (a quarter of the channels) fill whole bytes: a multiple of 32.
  const uint64_t channel_multiple = info.elem_bits == 4 || kv_dtype_wide_channels(dtype)
                                        ? 32
                                        : std::max<uint64_t>(8, info.channel_group_tokens / 4);
  if (info.channel_group_tokens != 0 && dim % channel_multiple != 0)
    return invalid_argument(std::string("KV format ") + info.name +
                            " needs a head dimension that is a multiple of " +
                            std::to_string(channel_multiple) + ", got " + std::to_string(dim));
  if (kv_dtype_rotated(dtype) && (dim & (dim - 1)) != 0)
    return invalid_argument(std::string("KV format ") + info.name +
                            " needs a head dimension that is a power of two, got " +
                            std::to_string(dim));
  return kv_vector_bytes(dtype, dim);
}

}  // namespace kvs
