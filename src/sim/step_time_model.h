// step_time_model: how long one engine step takes on a device, from what the step computes. A
// roofline per step, per tensor-parallel rank:
//
//   compute  = (2 x P_body x tokens + 2 x vocab x hidden x sampled rows) / (peak x eff_c)
//              + 4 x layers x q_heads x head_dim x attention pairs / attention rate
//   memory   = (weights read + KV read + KV written + 2 x copied KV) / (bandwidth x eff_m)
//   comm     = layers x 2 all-reduces of tokens x hidden x 2 B over the TP link (ring), tp > 1
//   transfer = swapped blocks x block bytes / host bandwidth
//   step     = max(compute, memory) + comm + transfer + overhead + per-sequence overhead x seqs
//
// (peak x eff_c) is the device's rate at the step's token count where the device has a rate curve
// (the calibrated CPU: linear_flops_by_tokens, device_model.h), else one number.
//
// all divided by tp where a rank holds 1/tp of the work. P_body = parameters - the embedding
// table (a gather, no FLOPs) - the LM head (counted per sampled row, not per token) when the
// vocabulary is known; else P. Weights read per step = the rank's weights minus the input
// embedding table. A chunk of n tokens starting at position s attends to s + i + 1 keys for its
// i-th token (n x s + n(n+1)/2 pairs) and reads the KV of its s + n positions once (FlashAttention
// reads a chunk's keys once per query tile; one tile per chunk is the model).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kvcache/kv_pool_plan.h"
#include "planner/model_config.h"
#include "sim/device_model.h"

namespace kvs {

// What the model costs on one rank.
struct ModelCost {
  uint32_t tp = 1;
  uint32_t layers = 0;
  uint32_t hidden = 0;
  double weights_read_bytes = 0;        // per step
  double flops_per_token = 0;           // 2 x P_body / tp
  double flops_per_sampled_row = 0;     // 2 x vocab x hidden / tp (0 when the vocab is unknown)
  double attention_flops_per_pair = 0;  // 4 x layers x q_heads x head_dim / tp
  double kv_bytes_per_token = 0;        // the rank's pool bytes per token
  bool fp8_weights = false;             // use the device's fp8 peak
};

// From the planner's model, the whole model's weight bytes, the rank's KV pool and tp.
[[nodiscard]] Result<ModelCost> model_cost(const PlannerModel& model, uint64_t weights_bytes,
                                           const KvPoolPlan& pool, uint32_t tp, bool fp8_weights);

// What one step does (summed over its chunks).
struct StepWork {
  uint64_t tokens = 0;          // query tokens (prefill chunks + decodes)
  uint32_t sequences = 0;       // chunks
  uint32_t sampled = 0;         // chunks that reach their sequence's end (a token is sampled)
  double attention_pairs = 0;   // (query, key) pairs
  uint64_t kv_read_tokens = 0;  // per chunk: its start + n positions
  uint64_t swapped_blocks = 0;  // swap-out + swap-in blocks
  uint64_t copied_tokens = 0;   // device-to-device KV copies (copy-on-write, partial reuse)

  // Adds a chunk of n tokens starting at position `start`; `samples` if it reaches the end.
  void add_chunk(uint32_t start, uint32_t n, bool samples);
};

// The terms of the roofline above, on one rank: FLOPs of the linear layers (2 x P_body x tokens
// + the LM head's sampled rows), FLOPs of attention (the pairs), and the bytes the step moves
// through device memory (weights read + KV read + KV written + copied KV, read and written).
// step_time divides them by the device's rates; bench/sim_calibrate fits the rates with them.
[[nodiscard]] double step_linear_flops(const ModelCost& cost, const StepWork& work);
[[nodiscard]] double step_attention_flops(const ModelCost& cost, const StepWork& work);
[[nodiscard]] double step_memory_bytes(const ModelCost& cost, const StepWork& work);

struct StepTime {
  double compute_s = 0;
  double memory_s = 0;
  double comm_s = 0;
  double transfer_s = 0;
  double overhead_s = 0;
  double total_s = 0;
};

[[nodiscard]] StepTime step_time(const DeviceModel& device, const ModelCost& cost,
                                 const StepWork& work, uint64_t block_bytes);

}  // namespace kvs
