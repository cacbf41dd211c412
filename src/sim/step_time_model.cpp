#include "sim/step_time_model.h"

#include <algorithm>
#include <cmath>

namespace kvs {

Result<ModelCost> model_cost(const PlannerModel& m, uint64_t weights_bytes, const KvPoolPlan& pool,
                             uint32_t tp, bool fp8_weights) {
  if (tp == 0) return invalid_argument("--tp must be at least 1");
  if (m.num_parameters == 0)
    return invalid_argument("the model's parameter count is unknown; the step-time model needs it");
  if (m.hidden_size == 0 || m.num_attention_heads == 0)
    return invalid_argument("the model's hidden size and attention heads are unknown");
  ModelCost c;
  c.tp = tp;
  c.layers = m.layer_count();  // model layers (a Falcon-H1 layer has two geometry entries)
  c.hidden = m.hidden_size;
  c.fp8_weights = fp8_weights;
  const double params = static_cast<double>(m.num_parameters);
  const double embed = static_cast<double>(m.vocab_size) * m.hidden_size;  // 0 if unknown
  // Body parameters: everything but the input embedding and the LM head (one table if tied).
  const double body = std::max(params * 0.5, params - embed * (m.tied_embeddings ? 1 : 2));
  c.flops_per_token = 2 * (m.vocab_size > 0 ? body : params) / tp;
  c.flops_per_sampled_row = 2 * embed / tp;
  // Query heads x head dim = the attention width (head_dim of the first attention layer).
  uint32_t head_dim = m.hidden_size / m.num_attention_heads;
  for (const KvLayer& l : m.layers)
    if (l.kind == KvLayerKind::kFull || l.kind == KvLayerKind::kSliding) {
      head_dim = l.head_dim_k;
      break;
    }
  c.attention_flops_per_pair = 4.0 * c.layers * m.num_attention_heads * head_dim / tp;
  const double per_rank = std::ceil(static_cast<double>(weights_bytes) / tp);
  // The input embedding is gathered (a row per token), not streamed; a tied table is read by the
  // LM head anyway.
  const double embed_share = m.tied_embeddings || params <= 0 ? 0 : std::min(0.5, embed / params);
  c.weights_read_bytes = per_rank * (1 - embed_share);
  c.kv_bytes_per_token = static_cast<double>(pool.bytes_per_token);
  return c;
}

void StepWork::add_chunk(uint32_t start, uint32_t n, bool samples) {
  tokens += n;
  ++sequences;
  sampled += samples ? 1 : 0;
  const double s = start, k = n;
  attention_pairs += k * s + k * (k + 1) / 2;
  kv_read_tokens += uint64_t{start} + n;
}

double step_linear_flops(const ModelCost& c, const StepWork& w) {
  return c.flops_per_token * static_cast<double>(w.tokens) + c.flops_per_sampled_row * w.sampled;
}

double step_attention_flops(const ModelCost& c, const StepWork& w) {
  return c.attention_flops_per_pair * w.attention_pairs;
}

double step_memory_bytes(const ModelCost& c, const StepWork& w) {
  return c.weights_read_bytes +
         c.kv_bytes_per_token *
             static_cast<double>(w.kv_read_tokens + w.tokens + 2 * w.copied_tokens);
}

StepTime step_time(const DeviceModel& d, const ModelCost& c, const StepWork& w,
                   uint64_t block_bytes) {
  StepTime t;
  const double linear_rate = linear_flops_at(d, static_cast<double>(w.tokens), c.fp8_weights);
  const double attention_rate =
      d.attention_flops > 0 ? d.attention_flops : d.peak_flops * d.compute_efficiency;
  t.compute_s = step_linear_flops(c, w) / linear_rate + step_attention_flops(c, w) / attention_rate;
  t.memory_s = step_memory_bytes(c, w) / (d.memory_bandwidth * d.memory_efficiency);
  if (c.tp > 1 && w.tokens > 0) {
    // Two all-reduces per layer (attention output, MLP output) of tokens x hidden x 2 B, ring.
    const double payload = static_cast<double>(w.tokens) * c.hidden * 2.0;
    const double per_reduce =
        d.allreduce_latency_s +
        (d.link_bandwidth > 0 ? 2.0 * (c.tp - 1) / c.tp * payload / d.link_bandwidth : 0);
    t.comm_s = 2.0 * c.layers * per_reduce;
  }
  if (d.host_bandwidth > 0)
    t.transfer_s =
        static_cast<double>(w.swapped_blocks) * static_cast<double>(block_bytes) / d.host_bandwidth;
  t.overhead_s = d.step_overhead_s + d.sequence_overhead_s * w.sequences;
  t.total_s = std::max(t.compute_s, t.memory_s) + t.comm_s + t.transfer_s + t.overhead_s;
  return t;
}

}  // namespace kvs
