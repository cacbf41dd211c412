// config_fields: typed reads of a model config's fields (config.json / catalog entries) with
// clear errors, shared by the readers of its dialects (model_config, ssm_state, layer_pattern).
// Absent and null fields are "not set"; a field of the wrong type or out of range is an error
// naming it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvs {

inline constexpr uint64_t kMaxConfigDim = uint64_t{1} << 24;

// A non-negative integer field, nullopt when absent or null; errors on another type or above max.
[[nodiscard]] Result<std::optional<uint64_t>> config_uint(const nlohmann::json& c, const char* key,
                                                          uint64_t max = kMaxConfigDim);
// config_uint as a uint32_t, `fallback` when absent.
[[nodiscard]] Result<uint32_t> config_u32_or(const nlohmann::json& c, const char* key,
                                             uint32_t fallback);
// The first of `keys` that is set (dialects spell the same size differently), else `fallback`.
[[nodiscard]] Result<uint32_t> config_first_u32(const nlohmann::json& c,
                                                std::initializer_list<const char*> keys,
                                                uint32_t fallback);
[[nodiscard]] std::string config_string_or(const nlohmann::json& c, const char* key,
                                           std::string fallback);
[[nodiscard]] bool config_bool_or(const nlohmann::json& c, const char* key, bool fallback);

// "bfloat16" -> "bf16", "float16"/"half" -> "f16", "float32"/"float" -> "f32"; others unchanged.
[[nodiscard]] std::string normalize_dtype(std::string d);
// The checkpoint's dtype (torch_dtype, or dtype in newer transformers), normalized; bf16 when
// neither is set.
[[nodiscard]] std::string checkpoint_dtype(const nlohmann::json& c);
// The dtype an engine computes and caches in for that checkpoint: the checkpoint's, except that a
// float32 checkpoint runs in 16 bits (vLLM's --dtype auto: bfloat16 where the GPU has it).
[[nodiscard]] std::string runtime_dtype(const nlohmann::json& c);
// Bytes per element of a recurrent state held in `dtype` (f32 4, bf16/f16 2); `field` names where
// the dtype came from in the error.
[[nodiscard]] Result<uint32_t> state_elem_bytes(const std::string& dtype, const char* field);

}  // namespace kvs
