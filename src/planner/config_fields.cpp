#include "planner/config_fields.h"

namespace kvs {

using nlohmann::json;

Result<std::optional<uint64_t>> config_uint(const json& c, const char* key, uint64_t max) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return std::optional<uint64_t>{};
  // Parsed files give non-negative integers as unsigned; built objects may hold them signed.
  if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0))
    return invalid_argument(std::string("config field '") + key +
                            "' must be a non-negative integer");
  const uint64_t v = it->get<uint64_t>();
  if (v > max)
    return invalid_argument(std::string("config field '") + key + "' is implausibly large (" +
                            std::to_string(v) + ")");
  return std::optional<uint64_t>{v};
}

Result<uint32_t> config_u32_or(const json& c, const char* key, uint32_t fallback) {
  KVS_ASSIGN_OR_RETURN(auto v, config_uint(c, key, kMaxConfigDim));
  return v ? static_cast<uint32_t>(*v) : fallback;
}

Result<uint32_t> config_first_u32(const json& c, std::initializer_list<const char*> keys,
                                  uint32_t fallback) {
  for (const char* key : keys) {
    KVS_ASSIGN_OR_RETURN(auto v, config_uint(c, key, kMaxConfigDim));
    if (v) return static_cast<uint32_t>(*v);
  }
  return fallback;
}

std::string config_string_or(const json& c, const char* key, std::string fallback) {
  auto it = c.find(key);
  if (it != c.end() && it->is_string()) return it->get<std::string>();
  return fallback;
}

bool config_bool_or(const json& c, const char* key, bool fallback) {
  auto it = c.find(key);
  if (it != c.end() && it->is_boolean()) return it->get<bool>();
  return fallback;
}

std::string normalize_dtype(std::string d) {
  if (d == "bfloat16") return "bf16";
  if (d == "float16" || d == "fp16" || d == "half") return "f16";
  if (d == "float32" || d == "fp32" || d == "float") return "f32";
  return d;
}

std::string checkpoint_dtype(const json& c) {
  return normalize_dtype(config_string_or(c, "torch_dtype", config_string_or(c, "dtype", "bf16")));
}

std::string runtime_dtype(const json& c) {
  const std::string d = checkpoint_dtype(c);
  return d == "f32" ? "bf16" : d;
}

Result<uint32_t> state_elem_bytes(const std::string& d, const char* field) {
  const std::string n = normalize_dtype(d);
  if (n == "f32") return 4u;
  if (n == "bf16" || n == "f16") return 2u;
  return invalid_argument(std::string("config field '") + field + "' = '" + d +
                          "' is not a state dtype the planner knows (float32, bfloat16, float16)");
}

}  // namespace kvs
