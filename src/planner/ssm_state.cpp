#include "planner/ssm_state.h"

#include <nlohmann/json.hpp>

#include "core/byte_size.h"
#include "planner/config_fields.h"

namespace kvs {
namespace {

struct StateDtypes {
  std::string conv, ssm;
  uint32_t conv_bytes = 0, ssm_bytes = 0;
};

Result<StateDtypes> state_dtypes(const nlohmann::json& c) {
  StateDtypes d;
  d.conv = runtime_dtype(c);
  const char* ssm_field = "mamba_ssm_cache_dtype";
  std::string ssm = config_string_or(c, ssm_field, "");
  if (ssm.empty()) {
    ssm_field = "mamba_ssm_dtype";
    ssm = config_string_or(c, ssm_field, "");
  }
  d.ssm = ssm.empty() || ssm == "auto" ? d.conv : normalize_dtype(ssm);
  KVS_ASSIGN_OR_RETURN(d.conv_bytes, state_elem_bytes(d.conv, "torch_dtype"));
  KVS_ASSIGN_OR_RETURN(d.ssm_bytes, state_elem_bytes(d.ssm, ssm_field));
  return d;
}

std::string n(uint64_t v) { return format_thousands(v); }

Status need(uint32_t v, const char* what) {
  if (v == 0) return invalid_argument(std::string("Mamba layers need ") + what);
  return Status::ok();
}

}  // namespace

Result<Mamba1Dims> mamba1_dims(const nlohmann::json& c) {
  KVS_ASSIGN_OR_RETURN(uint32_t d_conv,
                       config_first_u32(c, {"mamba_d_conv", "conv_kernel", "d_conv"}, 4));
  KVS_ASSIGN_OR_RETURN(uint32_t d_state,
                       config_first_u32(c, {"mamba_d_state", "state_size", "d_state"}, 16));
  KVS_ASSIGN_OR_RETURN(uint32_t expand, config_first_u32(c, {"mamba_expand", "expand"}, 2));
  KVS_ASSIGN_OR_RETURN(uint32_t hidden, config_first_u32(c, {"hidden_size", "d_model"}, 0));
  KVS_RETURN_IF_ERROR(need(hidden, "hidden_size (d_inner = mamba_expand x hidden_size)"));
  KVS_RETURN_IF_ERROR(need(d_conv, "mamba_d_conv >= 1"));
  return Mamba1Dims{.hidden = hidden,
                    .expand = expand,
                    .d_inner = uint64_t{expand} * hidden,
                    .d_state = d_state,
                    .d_conv = d_conv};
}

Result<RecurrentState> mamba1_state(const nlohmann::json& c) {
  KVS_ASSIGN_OR_RETURN(StateDtypes d, state_dtypes(c));
  KVS_ASSIGN_OR_RETURN(Mamba1Dims m, mamba1_dims(c));
  const uint64_t conv = (m.d_conv - 1) * m.d_inner;
  const uint64_t ssm = m.d_inner * m.d_state;
  RecurrentState s;
  s.bytes = {.conv = conv * d.conv_bytes, .recurrent = ssm * d.ssm_bytes};
  s.note = "Mamba1 state per layer and sequence: conv (" + n(m.d_conv) + " - 1) x " + n(m.d_inner) +
           " x " + n(d.conv_bytes) + " B (" + d.conv + ") = " + n(s.bytes.conv) + " B + SSM " +
           n(m.d_inner) + " x " + n(m.d_state) + " x " + n(d.ssm_bytes) + " B (" + d.ssm +
           ") = " + n(s.bytes.recurrent) + " B; d_inner = " + n(m.expand) + " x " + n(m.hidden);
  return s;
}

Result<Mamba2Dims> mamba2_dims(const nlohmann::json& c) {
  const bool hf_mamba2 = config_string_or(c, "model_type", "") == "mamba2";
  KVS_ASSIGN_OR_RETURN(uint32_t heads,
                       config_first_u32(c, {"mamba_n_heads", "mamba_num_heads"}, 0));
  KVS_ASSIGN_OR_RETURN(uint32_t head_dim,
                       config_first_u32(c, {"mamba_d_head", "mamba_head_dim"}, 0));
  if (hf_mamba2 && heads == 0) {
    KVS_ASSIGN_OR_RETURN(heads, config_u32_or(c, "num_heads", 0));
  }
  if (hf_mamba2 && head_dim == 0) {
    KVS_ASSIGN_OR_RETURN(head_dim, config_u32_or(c, "head_dim", 0));
  }
  KVS_ASSIGN_OR_RETURN(uint32_t d_state,
                       config_first_u32(c, {"mamba_d_state", "ssm_state_size", "state_size"}, 0));
  KVS_ASSIGN_OR_RETURN(uint32_t groups,
                       config_first_u32(c, {"mamba_n_groups", "n_groups", "mamba_num_groups"}, 1));
  KVS_ASSIGN_OR_RETURN(uint32_t d_conv, config_first_u32(c, {"mamba_d_conv", "conv_kernel"}, 4));
  KVS_RETURN_IF_ERROR(need(heads, "mamba_n_heads (or mamba_num_heads)"));
  KVS_RETURN_IF_ERROR(need(head_dim, "mamba_d_head (or mamba_head_dim)"));
  KVS_RETURN_IF_ERROR(need(d_state, "mamba_d_state (or ssm_state_size)"));
  KVS_RETURN_IF_ERROR(need(d_conv, "mamba_d_conv >= 1"));
  KVS_ASSIGN_OR_RETURN(uint32_t d_ssm, config_u32_or(c, "mamba_d_ssm", 0));
  return Mamba2Dims{.heads = heads,
                    .head_dim = head_dim,
                    .d_inner = d_ssm > 0 ? d_ssm : uint64_t{heads} * head_dim,
                    .d_state = d_state,
                    .groups = groups,
                    .d_conv = d_conv};
}

Result<RecurrentState> mamba2_state(const nlohmann::json& c) {
  KVS_ASSIGN_OR_RETURN(StateDtypes d, state_dtypes(c));
  KVS_ASSIGN_OR_RETURN(Mamba2Dims m, mamba2_dims(c));
  const uint64_t conv_dim = m.d_inner + 2 * m.groups * m.d_state;
  const uint64_t conv = (m.d_conv - 1) * conv_dim;
  const uint64_t ssm = m.heads * m.head_dim * m.d_state;
  RecurrentState s;
  s.bytes = {.conv = conv * d.conv_bytes, .recurrent = ssm * d.ssm_bytes};
  s.note = "Mamba2 state per layer and sequence: conv (" + n(m.d_conv) + " - 1) x (" +
           n(m.d_inner) + " + 2 x " + n(m.groups) + " x " + n(m.d_state) + ") x " +
           n(d.conv_bytes) + " B (" + d.conv + ") = " + n(s.bytes.conv) + " B + SSM " + n(m.heads) +
           " x " + n(m.head_dim) + " x " + n(m.d_state) + " x " + n(d.ssm_bytes) + " B (" + d.ssm +
           ") = " + n(s.bytes.recurrent) + " B";
  return s;
}

Result<RecurrentState> lightning_state(const nlohmann::json& c, uint32_t heads, uint32_t head_dim) {
  KVS_ASSIGN_OR_RETURN(StateDtypes d, state_dtypes(c));
  if (heads == 0 || head_dim == 0)
    return invalid_argument("lightning-attention layers need num_attention_heads and head_dim");
  const uint64_t elems = uint64_t{heads} * head_dim * head_dim;
  RecurrentState s;
  s.bytes = {.recurrent = elems * d.conv_bytes};
  s.note = "lightning-attention state per layer and sequence: " + n(heads) + " x " + n(head_dim) +
           " x " + n(head_dim) + " x " + n(d.conv_bytes) + " B (" + d.conv +
           ") = " + n(s.bytes.recurrent) + " B";
  return s;
}

}  // namespace kvs
