#include "server/capacity_line.h"

#include "core/check.h"
#include "planner/kv_format_levers.h"

namespace kvs {

namespace {

// Blocks one request of `tokens` tokens holds at its peak (all layer groups, a sliding group's
// window + prefill chunk; ceil(tokens / block_size) for a uniform model).
uint64_t blocks_for(const KvPoolPlan& pool, uint64_t tokens, uint32_t prefill_chunk) {
  return sequence_footprint(pool, tokens, prefill_chunk).blocks;
}

// The pool in lever f's formats, keeping the engine's --max-num-seqs and recent-token window
// (whose f16 rows come out of the same budget).
CapacityLever lever_for(const KvFormatLever& f, const KvPoolPlan& pool, const CapacityLine& base) {
  CapacityLever l{.name = f.name,
                  .change = f.k_dtype == f.v_dtype
                                ? std::string("--kv-cache-dtype ") + kv_dtype_name(f.k_dtype)
                                : std::string("--kv-cache-dtype-k ") + kv_dtype_name(f.k_dtype) +
                                      " --kv-cache-dtype-v " + kv_dtype_name(f.v_dtype)};
  KvModelShape s = pool.shape;
  s.k_dtype = f.k_dtype;
  s.v_dtype = f.v_dtype;
  const Result<KvPoolPlan> p =
      plan_kv_pool(s, base.kv_cache_memory, base.block_size, pool.max_num_seqs, pool.recent_window,
                   pool.attention_sink);
  if (!p.is_ok()) {
    l.applicable = false;
    l.why_not = p.status().message();
    return l;
  }
  l.bytes_per_token = p->bytes_per_token;
  l.num_blocks = p->num_blocks;
  l.fully_reserved = p->num_blocks / base.blocks_per_request;
  l.more_requests =
      static_cast<int64_t>(l.fully_reserved) - static_cast<int64_t>(base.fully_reserved);
  return l;
}

}  // namespace

CapacityLine capacity_line(const KvPoolPlan& pool, uint64_t kv_cache_memory, uint32_t max_model_len,
                           uint32_t prefill_chunk) {
  KVS_CHECK_MSG(max_model_len >= 1 && pool.block_size >= 1, "capacity_line of an empty plan");
  CapacityLine c{.formula = pool.formula,
                 .k_dtype = kv_dtype_name(pool.shape.k_dtype),
                 .v_dtype = kv_dtype_name(pool.shape.v_dtype),
                 .layer_formats = kv_layer_formats_suffix(pool.shape.layer_formats),
                 .bytes_per_token = pool.bytes_per_token,
                 .kv_cache_memory = kv_cache_memory,
                 .key_tail_bytes = pool.key_tail_bytes,
                 .recent_window = pool.recent_window,
                 .recent_window_bytes = pool.recent_window_bytes,
                 .max_num_seqs = pool.max_num_seqs,
                 .pool_bytes = pool.pool_bytes,
                 .num_blocks = pool.num_blocks,
                 .block_size = pool.block_size,
                 .pool_tokens = pool.num_tokens,
                 .max_model_len = max_model_len};
  c.blocks_per_request = blocks_for(pool, max_model_len, prefill_chunk);
  c.max_concurrency = static_cast<double>(pool.num_blocks) / c.blocks_per_request;
  c.fully_reserved = pool.num_blocks / c.blocks_per_request;

  const KvModelShape& shape = pool.shape;
  // The KV-format levers (planner/kv_format_levers.h: which apply, `kvserve plan` offers the
  // same).
  for (const KvFormatLever& f : kv_format_levers(shape.k_dtype, shape.v_dtype, pool.block_size)) {
    if (f.why_not.empty())
      c.levers.push_back(lever_for(f, pool, c));
    else
      c.levers.push_back({.name = f.name, .applicable = false, .why_not = f.why_not});
  }
  {
    const auto half = static_cast<uint32_t>(half_context(max_model_len));
    CapacityLever l{.name = kHalfContextLever,
                    .change = "--max-model-len " + std::to_string(half),
                    .bytes_per_token = c.bytes_per_token,
                    .num_blocks = c.num_blocks,
                    .fully_reserved = c.num_blocks / blocks_for(pool, half, prefill_chunk)};
    l.more_requests =
        static_cast<int64_t>(l.fully_reserved) - static_cast<int64_t>(c.fully_reserved);
    c.levers.push_back(l);
  }
  return c;
}

nlohmann::json capacity_json(const CapacityLine& c) {
  nlohmann::json levers = nlohmann::json::array();
  for (const CapacityLever& l : c.levers) {
    nlohmann::json j = {{"name", l.name}, {"change", l.change}, {"applicable", l.applicable}};
    if (l.applicable) {
      j["bytes_per_token"] = l.bytes_per_token;
      j["num_blocks"] = l.num_blocks;
      j["fully_reserved"] = l.fully_reserved;
      j["more_requests"] = l.more_requests;
    } else {
      j["why_not"] = l.why_not;
    }
    levers.push_back(std::move(j));
  }
  return {{"formula", c.formula},
          {"k_dtype", c.k_dtype},
          {"v_dtype", c.v_dtype},
          {"layer_formats", c.layer_formats},
          {"bytes_per_token", c.bytes_per_token},
          {"kv_cache_memory", c.kv_cache_memory},
          {"key_tail_bytes", c.key_tail_bytes},
          {"recent_window", c.recent_window},
          {"recent_window_bytes", c.recent_window_bytes},
          {"max_num_seqs", c.max_num_seqs},
          {"pool_bytes", c.pool_bytes},
          {"num_blocks", c.num_blocks},
          {"block_size", c.block_size},
          {"pool_tokens", c.pool_tokens},
          {"max_model_len", c.max_model_len},
          {"blocks_per_request", c.blocks_per_request},
          {"max_concurrency", c.max_concurrency},
          {"fully_reserved", c.fully_reserved},
          {"levers", std::move(levers)}};
}

}  // namespace kvs
