#include "kvcache/kv_geometry.h"

#include <algorithm>
#include <utility>

#include "core/byte_size.h"
#include "quant/key_tails.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

std::string bytes_per_elem_text(KvDtype dtype, uint32_t dim) {
  const KvDtypeInfo& info = kv_dtype_info(dtype);
  if (info.group_elems == 0 && info.vector_scale_bytes == 0 && info.elem_bits % 8 == 0)
    return std::to_string(info.elem_bits / 8);
  // Formats with scales: bytes per element as the exact fraction vector_bytes / dim.
  return "(" + std::to_string(kv_vector_bytes(dtype, dim)) + "/" + std::to_string(dim) + ")";
}

// The formula term for `count` identical layers, without the "= total" part.
std::string layer_term(const KvLayer& l, uint32_t count, KvDtype k, KvDtype v, uint32_t tp) {
  const std::string n = std::to_string(count);
  switch (l.kind) {
    case KvLayerKind::kFull:
    case KvLayerKind::kSliding: {
      const std::string heads = std::to_string(kv_heads_per_rank(l.kv_heads, tp));
      if (k == v && l.head_dim_k == l.head_dim_v)
        return n + " x 2 x " + heads + " x " + std::to_string(l.head_dim_k) + " x " +
               bytes_per_elem_text(k, l.head_dim_k);
      return n + " x " + heads + " x (" + std::to_string(l.head_dim_k) + " x " +
             bytes_per_elem_text(k, l.head_dim_k) + " + " + std::to_string(l.head_dim_v) + " x " +
             bytes_per_elem_text(v, l.head_dim_v) + ")";
    }
    case KvLayerKind::kMla: {
      const uint32_t dim = l.kv_lora_rank + l.qk_rope_head_dim;
      return n + " x (" + std::to_string(l.kv_lora_rank) + " + " +
             std::to_string(l.qk_rope_head_dim) + ") x " + bytes_per_elem_text(k, dim);
    }
    case KvLayerKind::kNoKv: return n + " x 0";
  }
  return "";
}

std::string layer_tag(const KvLayer& l) {
  switch (l.kind) {
    case KvLayerKind::kFull: return "full";
    case KvLayerKind::kSliding: return "window " + std::to_string(l.window);
    case KvLayerKind::kMla: return "MLA";
    case KvLayerKind::kNoKv: return "no KV";
  }
  return "";
}

// A layer with its formats: what one term of the formula covers.
struct FormattedLayer {
  KvLayer layer;
  KvDtype k, v;
  friend bool operator==(const FormattedLayer&, const FormattedLayer&) = default;
};

// Groups identical layers in identical formats (first-appearance order) with their counts.
std::vector<std::pair<FormattedLayer, uint32_t>> group_layers(const KvModelShape& s) {
  std::vector<std::pair<FormattedLayer, uint32_t>> groups;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const FormattedLayer l{s.layers[i], s.k_dtype_at(i), s.v_dtype_at(i)};
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == l; });
    if (it == groups.end())
      groups.emplace_back(l, 1);
    else
      ++it->second;
  }
  return groups;
}

}  // namespace

const char* kv_layer_kind_name(KvLayerKind kind) {
  switch (kind) {
    case KvLayerKind::kFull: return "full attention";
    case KvLayerKind::kSliding: return "sliding window";
    case KvLayerKind::kMla: return "MLA latent";
    case KvLayerKind::kNoKv: return "linear/SSM state";
  }
  return "unknown";
}

KvModelShape KvModelShape::uniform(const KvUniformShape& u) {
  KvModelShape s;
  s.layers.assign(u.layers, KvLayer::full(u.kv_heads, u.head_dim_k, u.head_dim_v));
  s.k_dtype = u.k_dtype;
  s.v_dtype = u.v_dtype;
  s.layer_formats = u.layer_formats;
  s.tp = 1;
  return s;
}

uint32_t kv_heads_per_rank(uint32_t kv_heads, uint32_t tp) {
  KVS_CHECK(tp >= 1);
  if (kv_heads == 0) return 0;  // not a valid shape; keeps the uniform formula exact for it
  if (tp >= kv_heads) return 1;
  return (kv_heads + tp - 1) / tp;  // exact when tp divides kv_heads; rounded up otherwise
}

Status check_kv_heads_split(uint32_t kv_heads, uint32_t tp) {
  if (tp == 0) return invalid_argument("tensor parallelism must be at least 1");
  if (kv_heads == 0 || kv_heads % tp == 0 || tp % kv_heads == 0) return Status::ok();
  std::string divisors;
  for (uint32_t d = 1; d <= kv_heads; ++d)
    if (kv_heads % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
  return invalid_argument(std::to_string(kv_heads) + " KV heads cannot be split over tp " +
                          std::to_string(tp) + ": tp must divide the KV heads (" + divisors +
                          ") or be a multiple of them (" + std::to_string(2 * kv_heads) + ", " +
                          std::to_string(3 * kv_heads) +
                          ", ...), as in vLLM; a rank cannot hold part of a head");
}

uint64_t kv_layer_token_bytes(const KvLayer& l, KvDtype k, KvDtype v, uint32_t tp) {
  switch (l.kind) {
    case KvLayerKind::kFull:
    case KvLayerKind::kSliding: {
      const uint64_t heads = kv_heads_per_rank(l.kv_heads, tp);
      return heads * (kv_vector_bytes(k, l.head_dim_k) + kv_vector_bytes(v, l.head_dim_v));
    }
    case KvLayerKind::kMla:
      // One latent per token (the compressed KV plus the shared RoPE key), replicated per rank.
      return kv_vector_bytes(k, uint64_t{l.kv_lora_rank} + l.qk_rope_head_dim);
    case KvLayerKind::kNoKv: return 0;
  }
  return 0;
}

uint64_t kv_layer_token_bytes(const KvModelShape& s, size_t i) {
  return kv_layer_token_bytes(s.layers[i], s.k_dtype_at(i), s.v_dtype_at(i), s.tp);
}

uint64_t kv_window_first_needed(uint32_t window, uint64_t step_start) {
  KVS_CHECK(window >= 1);
  return step_start >= window ? step_start - window + 1 : 0;
}

uint64_t kv_window_held_tokens(uint32_t window, uint64_t n, uint64_t chunk_tokens) {
  KVS_CHECK(chunk_tokens >= 1);
  const uint64_t step_start = chunk_tokens >= n ? 0 : n - chunk_tokens;
  return n - kv_window_first_needed(window, step_start);
}

uint64_t kv_blocks_spanned(uint64_t first, uint64_t end, uint32_t block_size) {
  KVS_CHECK(block_size >= 1);
  if (first >= end) return 0;
  return (end + block_size - 1) / block_size - first / block_size;
}

uint64_t kv_layer_held_tokens(const KvLayer& l, uint64_t n, uint64_t chunk_tokens) {
  switch (l.kind) {
    case KvLayerKind::kFull:
    case KvLayerKind::kMla: return n;
    case KvLayerKind::kSliding:
      return chunk_tokens == 0 ? std::min<uint64_t>(n, l.window)
                               : kv_window_held_tokens(l.window, n, chunk_tokens);
    case KvLayerKind::kNoKv: return 0;
  }
  return 0;
}

uint64_t kv_layer_held_slots(const KvLayer& l, uint64_t n, uint32_t block_size,
                             uint64_t chunk_tokens) {
  const uint64_t held = kv_layer_held_tokens(l, n, chunk_tokens);
  if (block_size == 0) return held;
  if (l.kind == KvLayerKind::kSliding && chunk_tokens > 0)
    return kv_blocks_spanned(n - held, n, block_size) * block_size;
  return (held + block_size - 1) / block_size * block_size;
}

uint64_t kv_layer_state_bytes(const KvLayer& l, uint32_t tp) {
  KVS_CHECK(tp >= 1);
  if (l.kind != KvLayerKind::kNoKv) return 0;
  return (l.state_bytes + tp - 1) / tp;
}

namespace {

KvSequenceRowBytes layer_rows(const KvLayer& l, const KvModelShape& s) {
  KvSequenceRowBytes rows;
  if (l.kind != KvLayerKind::kFull && l.kind != KvLayerKind::kSliding) return rows;
  const uint32_t heads = kv_heads_per_rank(l.kv_heads, s.tp);
  if (s.recent_window > 0) {
    KVS_CHECK(l.head_dim_k == l.head_dim_v);  // validate_kv_shape: one dim for K and V
    rows.recent_window = RecentWindow::bytes(1, s.recent_window, 1, heads, l.head_dim_k,
                                             s.attention_sink, s.recent_window_dtype);
  }
  if (kv_dtype_per_channel(s.k_dtype))
    rows.key_tails = KeyTails::bytes(1, 1, heads, l.head_dim_k, kv_channel_group_tokens(s.k_dtype));
  return rows;
}

}  // namespace

uint64_t kv_layer_row_bytes(const KvLayer& l, const KvModelShape& s) {
  return layer_rows(l, s).total();
}

uint64_t kv_layer_sequence_bytes(const KvLayer& l, const KvModelShape& s) {
  return kv_layer_state_bytes(l, s.tp) + kv_layer_row_bytes(l, s);
}

LinearStateBytes gated_delta_net_state_bytes(const GatedDeltaNetShape& g, uint32_t conv_elem_bytes,
                                             uint32_t recurrent_elem_bytes) {
  const uint64_t conv_dim =
      uint64_t{2} * g.key_heads * g.key_dim + uint64_t{g.value_heads} * g.value_dim;
  const uint64_t window = g.conv_kernel > 0 ? g.conv_kernel - 1 : 0;
  return {.conv = window * conv_dim * conv_elem_bytes,
          .recurrent = uint64_t{g.value_heads} * g.key_dim * g.value_dim * recurrent_elem_bytes};
}

Status check_recent_window(uint32_t tokens) {
  if (tokens % kRecentWindowAlign != 0 || tokens > kMaxRecentWindow)
    return invalid_argument("--kv-recent-window must be a multiple of " +
                            std::to_string(kRecentWindowAlign) + " tokens up to " +
                            std::to_string(kMaxRecentWindow) + ", got " + std::to_string(tokens));
  return Status::ok();
}

Status validate_kv_shape(const KvModelShape& s) {
  if (s.layers.empty()) return invalid_argument("the model has no layers");
  if (kv_dtype_per_channel(s.v_dtype))
    return invalid_argument(std::string("KV format ") + kv_dtype_name(s.v_dtype) +
                            " quantizes keys per channel and holds keys only; choose another V "
                            "format (--kv-cache-dtype-v), e.g. int4_had");
  if (s.tp == 0) return invalid_argument("tensor parallelism must be at least 1");
  if (s.attention_sink && s.recent_window == 0)
    return invalid_argument("--kv-attention-sink needs --kv-recent-window");
  KVS_RETURN_IF_ERROR(
      check_kv_layer_formats(s.layer_formats, static_cast<uint32_t>(s.layers.size()), s.k_dtype));
  KVS_RETURN_IF_ERROR(check_recent_window(s.recent_window));
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const KvLayer& l = s.layers[i];
    const std::string where =
        "layer " + std::to_string(i) + " (" + kv_layer_kind_name(l.kind) + ")";
    switch (l.kind) {
      case KvLayerKind::kSliding:
        if (l.window == 0) return invalid_argument(where + ": sliding window must be positive");
        [[fallthrough]];
      case KvLayerKind::kFull: {
        if (l.kv_heads == 0) return invalid_argument(where + ": no KV heads");
        if (Status split = check_kv_heads_split(l.kv_heads, s.tp); !split.is_ok())
          return invalid_argument(where + ": " + split.message());
        auto k = kv_vector_bytes_checked(s.k_dtype_at(i), l.head_dim_k);
        if (!k.is_ok()) return invalid_argument(where + ", K: " + k.status().message());
        auto v = kv_vector_bytes_checked(s.v_dtype_at(i), l.head_dim_v);
        if (!v.is_ok()) return invalid_argument(where + ", V: " + v.status().message());
        if (s.recent_window > 0 && l.head_dim_k != l.head_dim_v)
          return invalid_argument(where + ": --kv-recent-window needs the same head dim for K (" +
                                  std::to_string(l.head_dim_k) + ") and V (" +
                                  std::to_string(l.head_dim_v) + ")");
        break;
      }
      case KvLayerKind::kMla: {
        if (l.kv_lora_rank == 0) return invalid_argument(where + ": kv_lora_rank must be positive");
        if (s.layer_formats.k.contains(static_cast<uint32_t>(i)) ||
            s.layer_formats.v.contains(static_cast<uint32_t>(i)))
          return invalid_argument(where +
                                  ": per-layer K/V formats apply to attention heads; an "
                                  "MLA latent has none");
        if (s.recent_window > 0)
          return invalid_argument(where +
                                  ": --kv-recent-window keeps K and V heads in f16; an "
                                  "MLA latent has none");
        auto k = kv_vector_bytes_checked(s.k_dtype, uint64_t{l.kv_lora_rank} + l.qk_rope_head_dim);
        if (!k.is_ok()) return invalid_argument(where + ": " + k.status().message());
        break;
      }
      case KvLayerKind::kNoKv:
        if (s.layer_formats.k.contains(static_cast<uint32_t>(i)) ||
            s.layer_formats.v.contains(static_cast<uint32_t>(i)))
          return invalid_argument(where + ": the layer stores no K or V to give a format");
        break;
    }
  }
  return Status::ok();
}

KvShapeBytes kv_shape_bytes(const KvModelShape& s) {
  KvShapeBytes out;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const KvLayer& l = s.layers[i];
    const auto kind = static_cast<size_t>(l.kind);
    ++out.layers_by_kind[kind];
    const uint64_t b = kv_layer_token_bytes(s, i);
    out.token_bytes_by_kind[kind] += b;
    out.bytes_per_token += b;
    out.state_bytes_per_sequence += kv_layer_state_bytes(l, s.tp);
    const KvSequenceRowBytes rows = layer_rows(l, s);
    out.rows_per_sequence.recent_window += rows.recent_window;
    out.rows_per_sequence.key_tails += rows.key_tails;
  }
  const auto groups = group_layers(s);
  // Layers that differ other than in their formats get their kind tagged.
  const bool layers_differ = std::any_of(
      s.layers.begin(), s.layers.end(), [&](const KvLayer& l) { return !(l == s.layers.front()); });
  std::string terms;
  for (const auto& [fl, count] : groups) {
    const KvLayer& layer = fl.layer;
    if (layer.kind == KvLayerKind::kNoKv) continue;
    if (!terms.empty()) terms += " + ";
    terms += layer_term(layer, count, fl.k, fl.v, s.tp);
    // A lone full-attention group is the textbook formula: no tag. Per-layer formats tag each
    // term with its formats.
    std::string tag;
    if (layers_differ || layer.kind != KvLayerKind::kFull) tag = layer_tag(layer);
    if (!s.layer_formats.empty()) {
      const std::string formats =
          std::string("K ") + kv_dtype_name(fl.k) + ", V " + kv_dtype_name(fl.v);
      tag = tag.empty() ? formats : tag + ", " + formats;
    }
    if (!tag.empty()) terms += " [" + tag + "]";
  }
  if (terms.empty()) terms = "0";
  out.formula = terms + " = " + format_thousands(out.bytes_per_token) + " B";
  return out;
}

KvRequestBytes kv_request_breakdown(const KvModelShape& s, uint64_t n_tokens,
                                    uint64_t chunk_tokens) {
  KvRequestBytes out;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const KvLayer& l = s.layers[i];
    const uint64_t b =
        kv_layer_token_bytes(s, i) * kv_layer_held_tokens(l, n_tokens, chunk_tokens) +
        kv_layer_sequence_bytes(l, s);
    out.by_kind[static_cast<size_t>(l.kind)] += b;
    out.total += b;
  }
  return out;
}

uint64_t kv_request_bytes(const KvModelShape& s, uint64_t n_tokens, uint64_t chunk_tokens) {
  return kv_request_breakdown(s, n_tokens, chunk_tokens).total;
}

KvTokenBytes kv_token_bytes(const KvUniformShape& u) {
  const KvModelShape shape = KvModelShape::uniform(u);
  const KvLayer layer = KvLayer::full(u.kv_heads, u.head_dim_k, u.head_dim_v);
  const KvShapeBytes general = kv_shape_bytes(shape);
  KvTokenBytes out;
  out.k_bytes_per_layer = uint64_t{u.kv_heads} * kv_vector_bytes(u.k_dtype, u.head_dim_k);
  out.v_bytes_per_layer = uint64_t{u.kv_heads} * kv_vector_bytes(u.v_dtype, u.head_dim_v);
  out.bytes_per_token = general.bytes_per_token;
  KVS_CHECK(u.layers == 0 || !u.layer_formats.empty() ||
            out.bytes_per_token ==
                uint64_t{u.layers} * kv_layer_token_bytes(layer, u.k_dtype, u.v_dtype, 1));
  out.formula = general.formula;
  return out;
}

}  // namespace kvs
