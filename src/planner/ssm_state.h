// ssm_state: the fixed per-sequence state of a recurrent layer, sized as vLLM sizes it
// (MambaStateShapeCalculator / MambaStateDtypeCalculator in
// vllm/model_executor/layers/mamba/mamba_utils.py), from any of the config dialects that
// describe one. Elements per layer and sequence (all TP ranks together):
//
//   Mamba1     conv (d_conv - 1) x d_inner                      SSM d_inner x d_state
//   Mamba2     conv (d_conv - 1) x (d_inner + 2 x n_groups x d_state)
//                                                               SSM heads x head_dim x d_state
//   lightning  heads x head_dim x head_dim (one state, MiniMax-01's linear attention)
//
// The conv state (and the lightning state) is in the engine's model dtype (runtime_dtype: a
// float32 checkpoint runs in 16 bits); the SSM state in `mamba_ssm_cache_dtype` when the config
// names it (or Qwen3.5's `mamba_ssm_dtype`), else the model dtype.
//
// Keys read, first that is set (Jamba / Nemotron-H / Granite 4.0-H and Falcon-H1 / HF Mamba):
//   d_conv     mamba_d_conv, conv_kernel, d_conv                         (default 4)
//   d_state    mamba_d_state, ssm_state_size, state_size, d_state       (Mamba1 default 16)
//   Mamba1 d_inner = (mamba_expand, expand; default 2) x hidden_size
//   Mamba2 heads   mamba_n_heads, mamba_num_heads (num_heads for model_type mamba2)
//          head_dim mamba_d_head, mamba_head_dim (head_dim for model_type mamba2)
//          n_groups mamba_n_groups, n_groups, mamba_num_groups           (default 1)
//          d_inner  mamba_d_ssm when set (Falcon-H1), else heads x head_dim
//
// Under tensor parallelism vLLM splits the state by heads (kv_geometry: ceil(state / tp) per
// rank); it also pads n_groups up to tp when tp does not divide it, a few KiB per layer that the
// planner does not count.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

// The sizes of a Mamba layer as the config gives them (the keys above), shared by the state
// (below) and the weights (param_estimate.h).
struct Mamba1Dims {
  uint64_t hidden = 0, expand = 0, d_inner = 0, d_state = 0, d_conv = 0;
};
struct Mamba2Dims {
  uint64_t heads = 0, head_dim = 0, d_inner = 0, d_state = 0, groups = 0, d_conv = 0;
};
[[nodiscard]] Result<Mamba1Dims> mamba1_dims(const nlohmann::json& config);
[[nodiscard]] Result<Mamba2Dims> mamba2_dims(const nlohmann::json& config);

struct RecurrentState {
  LinearStateBytes bytes;  // conv + SSM (lightning: all in `recurrent`)
  std::string note;        // the formula with the config's numbers and the dtypes
};

[[nodiscard]] Result<RecurrentState> mamba1_state(const nlohmann::json& config);
[[nodiscard]] Result<RecurrentState> mamba2_state(const nlohmann::json& config);
// heads and head_dim are the attention's (MiniMax: num_attention_heads, head_dim).
[[nodiscard]] Result<RecurrentState> lightning_state(const nlohmann::json& config, uint32_t heads,
                                                     uint32_t head_dim);

}  // namespace kvs
