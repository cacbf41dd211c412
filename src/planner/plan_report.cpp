#include "planner/plan_report.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "core/byte_size.h"

namespace kvs {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kGB = 1e9;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string human_binary(double b) {
  if (b >= kGiB) return fixed(b / kGiB, 2) + " GiB";
  if (b >= 1024.0 * 1024) return fixed(b / (1024.0 * 1024), 2) + " MiB";
  if (b >= 1024.0) return fixed(b / 1024.0, 2) + " KiB";
  return fixed(b, 0) + " B";
}

std::string human_decimal(double b) {
  if (b >= kGB) return fixed(b / kGB, 2) + " GB";
  if (b >= 1e6) return fixed(b / 1e6, 2) + " MB";
  if (b >= 1e3) return fixed(b / 1e3, 2) + " kB";
  return fixed(b, 0) + " B";
}

std::string typed(const SizeInput& s) {
  if (s.text.empty() || s.convention == UnitConvention::kBytes) return bytes_both_units(s.bytes);
  return s.text + " = " + bytes_both_units(s.bytes);
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string lpad(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

std::string dtype_line(KvDtype k, KvDtype v) {
  const KvDtypeInfo& ki = kv_dtype_info(k);
  const KvDtypeInfo& vi = kv_dtype_info(v);
  std::string s = std::string("K ") + ki.name + " (scales: " + ki.scale_note + ")";
  if (k == v) return std::string("K and V ") + ki.name + " (scales: " + ki.scale_note + ")";
  return s + ", V " + vi.name + " (scales: " + vi.scale_note + ")";
}

// Per layer kind (layer_role.h) at the plan's context, exact tokens.
std::vector<LayerRoleBytes> role_bytes(const PlanOutcome& out) {
  return layer_role_breakdown(out.request.model.layer_roles(), out.inputs.shape,
                              out.request.workload.context,
                              out.request.workload.window_chunk_tokens);
}

void model_section(std::ostringstream& o, const PlanOutcome& out) {
  const PlannerModel& m = out.request.model;
  o << "Model: " << m.display_name << " (" << m.name << ")\n";
  o << "  source: " << m.source << "\n";
  const std::vector<LayerRoleBytes> roles = role_bytes(out);
  o << "  " << (m.architecture.empty() ? "" : m.architecture + ", ") << m.layer_count()
    << " layers:";
  bool first = true;
  for (const LayerRoleBytes& b : roles) {
    o << (first ? " " : ", ") << b.layers << " " << layer_role_name(b.role);
    first = false;
  }
  o << "\n";
  if (const uint32_t kvh = m.kv_heads(); kvh > 0 && m.num_attention_heads > 0) {
    const char* kind = kvh == m.num_attention_heads ? "MHA" : kvh == 1 ? "MQA" : "GQA";
    const KvLayer* first_attn = nullptr;
    for (const KvLayer& l : m.layers)
      if (l.kind == KvLayerKind::kFull || l.kind == KvLayerKind::kSliding) {
        first_attn = &l;
        break;
      }
    o << "  " << m.num_attention_heads << " query heads, " << kvh << " KV heads (" << kind;
    if (kind[0] == 'G') o << ", " << m.num_attention_heads / kvh << " queries per KV head";
    o << "), head_dim ";
    if (first_attn->head_dim_k == first_attn->head_dim_v)
      o << first_attn->head_dim_k;
    else
      o << "K " << first_attn->head_dim_k << " / V " << first_attn->head_dim_v;
    o << "\n";
  }
  if (m.num_experts > 0)
    o << "  MoE: " << m.num_experts << " routed experts (experts add weights, not KV)\n";
  for (const std::string& n : m.notes) o << "  note: " << n << "\n";
}

void formula_section(std::ostringstream& o, const PlanOutcome& out) {
  const PlanRequest& r = out.request;
  const CapacityPlan& p = out.plan;
  o << "\nKV format: " << dtype_line(r.k_dtype, r.v_dtype)
    << kv_layer_formats_suffix(r.layer_formats) << "\n";
  if (r.tp > 1)
    o << "Tensor parallel: " << r.tp << " GPUs; KV heads per GPU = kv_heads / " << r.tp
      << " (1, replicated, when " << r.tp
      << " >= kv_heads); MLA latents are replicated; all sizes below are per GPU unless marked "
         "total\n";
  o << "Units: B = byte, GB = 10^9 B, GiB = 2^30 B; computed sizes are shown in both.\n";
  o << "\nBytes per token\n";
  o << "  KV bytes/token = layers x 2 (K,V) x kv_heads x head_dim x bytes/element"
       " (MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes/element)\n";
  o << "                 = " << p.per_token.formula << " ("
    << human_binary(static_cast<double>(p.per_token.bytes_per_token)) << ")\n";
  // Per layer kind, in the model's terms: what each kind holds per token and per sequence.
  for (const LayerRoleBytes& b : role_bytes(out)) {
    o << "  " << pad(layer_role_name(b.role), 30) << lpad(std::to_string(b.layers), 4)
      << " layers  ";
    if (b.bytes_per_token > 0)
      o << lpad(format_thousands(b.bytes_per_token), 12) << " B/token"
        << (b.role == LayerRole::kSlidingWindow || b.role == LayerRole::kChunkedAttention
                ? " (only up to the window)"
                : "");
    if (b.state_bytes > 0)
      o << (b.bytes_per_token > 0 ? ", " : "") << format_thousands(b.state_bytes)
        << " B per sequence (fixed state, independent of length)";
    if (b.bytes_per_token == 0 && b.state_bytes == 0) o << "nothing (no KV, no state)";
    o << "\n";
  }
  // The engine's f16 rows beside the blocks: counted in every request below.
  const KvModelShape& shape = out.inputs.shape;
  const KvSequenceRowBytes& rows = out.plan.per_token.rows_per_sequence;
  if (rows.total() > 0) {
    o << "  + per sequence beside the blocks, in f16 (as the engine holds them):";
    if (rows.recent_window > 0)
      o << " recent window (" << shape.recent_window << " + 16"
        << (shape.attention_sink ? " + 2 sink" : "") << " tokens of K and V"
        << (shape.recent_window_dtype == KvDtype::kInt8 ? ", the window's in int8" : "") << ") "
        << format_thousands(rows.recent_window) << " B" << (rows.key_tails > 0 ? ";" : "");
    if (rows.key_tails > 0)
      o << " key tails (" << kv_channel_group_tokens(shape.k_dtype)
        << " keys of the partly filled group) " << format_thousands(rows.key_tails) << " B";
    o << "\n";
  }
}

void request_section(std::ostringstream& o, const PlanOutcome& out) {
  const CapacityPlan& p = out.plan;
  const PlanWorkload& w = out.request.workload;
  o << "\nPer request at " << format_thousands(w.context)
    << " tokens: " << bytes_both_units(p.request.total) << "\n";
  const uint32_t max_ctx = out.request.model.max_context;
  if (max_ctx > 0 && w.context > max_ctx)
    o << "  note: longer than the model's trained context (" << format_thousands(max_ctx)
      << " tokens)\n";
  for (const LayerRoleBytes& b : role_bytes(out))
    o << "  " << pad(layer_role_name(b.role), 30) << lpad(format_thousands(b.request_bytes), 18)
      << " B\n";
  if (const uint64_t rows = p.per_token.rows_per_sequence.total(); rows > 0)
    o << "  of which f16 rows beside the blocks     " << lpad(format_thousands(rows), 12) << " B\n";
  const bool windowed = p.per_token.layers_by_kind[static_cast<int>(KvLayerKind::kSliding)] > 0;
  if (windowed && w.window_chunk_tokens > 0)
    o << "  windowed layers as held during a step of " << format_thousands(w.window_chunk_tokens)
      << " tokens (--max-num-batched-tokens): min(N, window - 1 + "
      << format_thousands(w.window_chunk_tokens)
      << ") tokens; paged: the most whole blocks they span at any step on the way to N\n";
  if (w.block_size > 0) {
    o << "  paged (block " << w.block_size << " tokens): " << format_thousands(p.request_paged)
      << " B (";
    if (windowed && w.window_chunk_tokens > 0)
      o << "partial blocks at both ends of each window and the last block of the others";
    else
      o << "at most one partial block per layer group";
    o << ": +" << format_thousands(p.request_paged - p.request.total) << " B)\n";
  }
}

void memory_section(std::ostringstream& o, const PlanOutcome& out) {
  const PlanRequest& r = out.request;
  const CapacityPlan& p = out.plan;
  o << "\nMemory (per GPU)\n";
  if (r.gpu_memory_overridden)
    o << "  GPU " << r.gpu_name << " with --memory " << r.gpu_memory.text << ": "
      << typed(r.gpu_memory) << "\n    (" << r.gpu_note << ")\n";
  else if (!r.gpu_name.empty())
    o << "  GPU " << r.gpu_name << ": " << bytes_both_units(r.gpu_memory.bytes) << "\n    ("
      << r.gpu_note << ")\n";
  else
    o << "  GPU memory: " << typed(r.gpu_memory) << "\n";
  o << "  usable at " << fixed(r.utilization * 100, 1) << "%: " << bytes_both_units(p.usable_bytes)
    << "\n";
  o << "  - weights: " << (r.tp > 1 ? "1/" + std::to_string(r.tp) + " of " : "") << typed(r.weights)
    << "\n      from " << r.weights_origin << "\n";
  if (r.tp > 1) o << "      per GPU: " << bytes_both_units(p.weights_per_gpu) << "\n";
  o << "  - workspace: " << typed(r.workspace) << "\n";
  o << "  = KV budget: ";
  if (p.kv_budget_signed < 0)
    o << "none: weights and workspace exceed usable memory by "
      << bytes_both_units(static_cast<uint64_t>(-p.kv_budget_signed)) << "\n";
  else
    o << bytes_both_units(p.kv_budget) << "\n";
  if (r.tp > 1)
    o << "  totals over " << r.tp << " GPUs: memory " << bytes_both_units(p.total_gpu_memory)
      << ", KV budget " << bytes_both_units(p.total_kv_budget) << "\n";
}

void capacity_section(std::ostringstream& o, const PlanOutcome& out) {
  const CapacityPlan& p = out.plan;
  const PlanWorkload& w = out.request.workload;
  o << "\nCapacity\n";
  o << "  C_max worst case (every request at " << format_thousands(w.context) << " tokens) = floor("
    << format_thousands(p.kv_budget) << " / " << format_thousands(p.request_paged)
    << ") = " << p.c_max_worst << "  (" << fixed(p.c_max_worst_exact, 2) << ")\n";
  if (p.has_expected) {
    o << "  C_max expected case ("
      << (out.request.length_distribution_origin.empty()
              ? "every request at the average"
              : "distribution " + out.request.length_distribution_origin)
      << ", mean " << fixed(p.expected_tokens, 1) << " tokens) = " << p.c_max_expected << "\n";
    o << "    paged: " << human_binary(p.expected_request_paged)
      << " per request, of which paging waste " << human_binary(p.paging_waste_per_request)
      << " (at most one partial block per layer group)\n";
    o << "    contiguous reservation of the full context: C = " << p.c_max_contiguous
      << ", wasting " << human_binary(p.contiguous_waste_per_request) << " per request\n";
  }
  if (p.has_prefix) {
    o << "  prefix sharing: " << format_thousands(p.shared_prefix_tokens)
      << " shared tokens (whole blocks) stored once = " << bytes_both_units(p.prefix_bytes)
      << "\n    C_max with sharing = floor((budget - prefix) / "
      << format_thousands(p.request_unique_bytes) << ") = " << p.c_max_with_prefix << "; frees "
      << bytes_both_units(p.prefix_freed_bytes) << " at "
      << (p.has_concurrency ? p.concurrency : p.c_max_worst) << " requests\n";
  }
}

void verdict_section(std::ostringstream& o, const PlanOutcome& out) {
  const CapacityPlan& p = out.plan;
  const PlanWorkload& w = out.request.workload;
  auto context_text = [&] {
    return p.context_unbounded ? std::string("any length (every KV layer is windowed)")
                               : format_thousands(p.max_context) + " tokens";
  };
  o << "\nVerdict: ";
  if (p.has_concurrency) {
    o << (p.fits ? "FITS" : "DOES NOT FIT") << ": " << p.concurrency << " x "
      << human_binary(static_cast<double>(p.request_paged)) << " = "
      << bytes_both_units(p.total_at_concurrency) << (p.fits ? " <= " : " > ") << "budget "
      << human_binary(static_cast<double>(p.kv_budget)) << "\n";
    if (!p.fits)
      o << "  largest concurrency at " << format_thousands(w.context)
        << " tokens: " << p.c_max_worst << "; largest context for " << p.concurrency
        << " requests: " << context_text() << "\n";
    else
      o << "  headroom: " << p.c_max_worst - p.concurrency << " more requests at "
        << format_thousands(w.context) << " tokens; " << p.concurrency << " requests fit up to "
        << context_text() << "\n";
  } else if (p.c_max_worst >= 1) {
    o << "FITS: up to " << p.c_max_worst << " concurrent requests at "
      << format_thousands(w.context) << " tokens\n";
  } else {
    o << "DOES NOT FIT: not even one request at " << format_thousands(w.context)
      << " tokens; the largest context for one request is " << context_text() << "\n";
  }
}

void levers_section(std::ostringstream& o, const PlanOutcome& out) {
  o << "\nLevers (each changes one thing; C_max is worst case)\n";
  o << "  " << pad("lever", 40) << lpad("B/token", 12) << lpad("per request", 14)
    << lpad("C_max", 8) << lpad("vs plan", 9) << "\n";
  const uint64_t base = out.levers.empty() ? 0 : out.levers.front().c_max;
  for (const Lever& l : out.levers) {
    o << "  " << pad(l.name, 40);
    if (!l.applicable) {
      o << "  n/a: " << l.why_not << "\n";
      continue;
    }
    const int64_t delta = static_cast<int64_t>(l.c_max) - static_cast<int64_t>(base);
    o << lpad(format_thousands(l.bytes_per_token), 12)
      << lpad(human_binary(static_cast<double>(l.request_bytes)), 14)
      << lpad(std::to_string(l.c_max), 8)
      << lpad(&l == &out.levers.front() ? "" : (delta >= 0 ? "+" : "") + std::to_string(delta), 9);
    if (out.plan.has_concurrency && &l != &out.levers.front())
      o << (l.fits ? "  fits" : "  does not fit");
    o << "\n";
  }
}

}  // namespace

std::string bytes_both_units(uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " B";
  return format_thousands(bytes) + " B = " + human_binary(static_cast<double>(bytes)) + " = " +
         human_decimal(static_cast<double>(bytes));
}

std::string bytes_both_units(double bytes) {
  return bytes_both_units(static_cast<uint64_t>(std::llround(bytes)));
}

std::string unit_convention_note(const PlanOutcome& out) {
  if (!out.other_units || out.other_units->c_max_worst == out.plan.c_max_worst) return "";
  const PlanRequest& r = out.request;
  const CapacityPlan& a = out.plan;
  const CapacityPlan& b = *out.other_units;
  // Which convention the typed sizes used (the first one with a unit).
  UnitConvention typed_in = UnitConvention::kBytes;
  for (const SizeInput* s : {&r.gpu_memory, &r.weights, &r.workspace})
    if (s->convention != UnitConvention::kBytes) {
      typed_in = s->convention;
      break;
    }
  const bool dec = typed_in == UnitConvention::kDecimal;
  std::ostringstream o;
  o << "\nUnit conventions: the sizes were given in " << (dec ? "GB (10^9 B)" : "GiB (2^30 B)")
    << ": C_max = " << a.c_max_worst << " (" << fixed(a.c_max_worst_exact, 2) << ").\n"
    << "  Read as " << (dec ? "GiB (2^30 B)" : "GB (10^9 B)")
    << " the same numbers give a KV budget of " << bytes_both_units(b.kv_budget)
    << " and C_max = " << b.c_max_worst << " (" << fixed(b.c_max_worst_exact, 2) << ").\n"
    << "  They differ because 1 GiB = 1.0737 GB: a request's KV is a power-of-two count ("
    << human_binary(static_cast<double>(a.request_paged)) << " = "
    << human_decimal(static_cast<double>(a.request_paged))
    << ") while the budget is whatever unit it was typed in; dividing a GB budget by a request "
       "size in GiB (or the reverse) is off by 7.4%.\n";
  return o.str();
}

// What kvserve's pool holds for one request at its peak: block-rounded, with the sliding
// groups' window + prefill chunk (kvcache/kv_pool_plan.h, sequence_footprint).
static void engine_sequence_section(std::ostringstream& o, const PlanOutcome& out) {
  const KvSequenceFootprint& q = *out.engine_sequence;
  const std::vector<uint32_t>& w = out.engine_sequence_windows;
  o << "\nEngine footprint of one " << format_thousands(q.tokens)
    << "-token request (kvserve's paged pool, block " << out.request.workload.block_size
    << ", prompt prefilled in chunks of " << q.prefill_chunk << ")\n";
  for (size_t g = 0; g < q.group_blocks.size(); ++g) {
    o << "  group " << g << (w[g] == 0 ? " (full)" : " (window " + std::to_string(w[g]) + ")")
      << ": " << q.group_blocks[g] << " blocks\n";
  }
  o << "  peak " << format_thousands(q.blocks) << " blocks = " << bytes_both_units(q.bytes);
  if (q.all_full_bytes != q.bytes)
    o << " (every layer full: " << bytes_both_units(q.all_full_bytes) << ", " << std::fixed
      << std::setprecision(1) << 100.0 * (1.0 - double(q.bytes) / double(q.all_full_bytes))
      << "% saved)";
  o << "\n  (= kvserve generate --json kv_bytes_in_use for such a prompt)\n";
}

std::string render_plan_report(const PlanOutcome& out) {
  std::ostringstream o;
  o << "kvserve plan\n\n";
  model_section(o, out);
  formula_section(o, out);
  request_section(o, out);
  memory_section(o, out);
  capacity_section(o, out);
  verdict_section(o, out);
  o << unit_convention_note(out);
  levers_section(o, out);
  if (out.engine_pool) {
    const KvPoolPlan& e = *out.engine_pool;
    o << "\nEngine pool for --kv-cache-memory " << typed(*out.request.kv_cache_memory)
      << " (what kvserve generate/serve allocate)\n"
      << "  bytes/token " << e.formula << "\n"
      << "  block " << out.request.workload.block_size
      << " tokens = " << format_thousands(e.block_bytes) << " B; blocks = floor(";
    if (e.key_tail_bytes > 0 || e.recent_window_bytes > 0) {
      // The per-sequence f16 rows first (kv_pool_plan.h): per-channel keys' partly filled
      // groups, the recent-token window.
      o << "(" << format_thousands(out.request.kv_cache_memory->bytes);
      if (e.key_tail_bytes > 0) o << " - " << format_thousands(e.key_tail_bytes) << " key tails";
      if (e.recent_window_bytes > 0)
        o << " - " << format_thousands(e.recent_window_bytes) << " recent window";
      o << ")";
    } else {
      o << format_thousands(out.request.kv_cache_memory->bytes);
    }
    o << " / " << format_thousands(e.block_bytes) << ") = " << e.num_blocks << "\n"
      << "  tokens " << format_thousands(e.num_tokens) << ", pool "
      << bytes_both_units(e.pool_bytes) << "\n";
    if (e.key_tail_slots > 0)
      o << "  key tails " << e.key_tail_slots << " (--max-num-seqs "
        << out.request.engine_max_num_seqs << " x " << e.groups.num_groups() << " layer groups) x "
        << e.unit.layers << " layers x " << e.unit.kv_heads << " kv heads x 16 x "
        << e.unit.head_dim_k << " x 2 B = " << format_thousands(e.key_tail_bytes)
        << " B: the f16 keys of each "
        << "sequence's partly filled 16-token group\n";
    if (e.recent_window_bytes > 0) {
      // Rows of f16 (the sink's among them), or of int8 with their f16 scale and the sink's f16.
      const bool int8 = e.recent_window_dtype == KvDtype::kInt8;
      const std::string dim = std::to_string(e.unit.head_dim_k);
      const std::string sink_rows = e.attention_sink ? " + 2" : "";
      o << "  recent window " << e.recent_window_slots << " (--max-num-seqs) x "
        << e.shape.layers.size() << " layers x " << e.unit.kv_heads << " kv heads x ("
        << e.recent_window << " + 16" << (int8 ? "" : sink_rows) << ") x "
        << (int8 ? "(" + dim + " + 2) B x 2 (K, V)" : dim + " x 2 B x 2 (K, V)")
        << (int8 && e.attention_sink ? " + the same x 2 x " + dim + " x 2 B x 2 (the sink)" : "")
        << " = " << format_thousands(e.recent_window_bytes)
        << " B: each sequence's newest tokens in "
        << (int8 ? "int8 with an f16 scale per row" : "f16")
        << (e.attention_sink
                ? ", and position 0's f16 rows of each sequence and of as many start tokens (the "
                  "attention sink)"
                : "")
        << "\n";
    }
  }
  if (out.engine_sequence) engine_sequence_section(o, out);
  return o.str();
}

}  // namespace kvs
