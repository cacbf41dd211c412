#include "quant/kv_layer_formats.h"

#include <charconv>

namespace kvs {

namespace {

KvDtype at(const std::map<uint32_t, KvDtype>& m, uint32_t layer, KvDtype pool) {
  const auto it = m.find(layer);
  return it == m.end() ? pool : it->second;
}

// A layer number: decimal digits only, below 2^16 (no model has that many layers; a range's
// entries stay few).
Result<uint32_t> parse_layer(std::string_view s, std::string_view item, std::string_view flag) {
  uint32_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || n >= (1u << 16))
    return invalid_argument(std::string(flag) + ": \"" + std::string(item) +
                            "\" is not LAYER=FORMAT or FIRST-LAST=FORMAT (layers count from 0)");
  return n;
}

// invalid_argument naming `flag` for the first listed layer the model lacks.
Status check_layers_exist(const std::map<uint32_t, KvDtype>& listed, uint32_t layers,
                          std::string_view flag) {
  if (listed.empty() || listed.rbegin()->first < layers) return Status::ok();
  return invalid_argument(std::string(flag) + ": layer " + std::to_string(listed.rbegin()->first) +
                          ": the model has " + std::to_string(layers) + " layers (0 to " +
                          std::to_string(layers - 1) + ")");
}

}  // namespace

KvDtype KvLayerFormats::k_at(uint32_t layer, KvDtype pool) const { return at(k, layer, pool); }
KvDtype KvLayerFormats::v_at(uint32_t layer, KvDtype pool) const { return at(v, layer, pool); }

Result<std::map<uint32_t, KvDtype>> parse_kv_layer_formats(std::string_view text,
                                                           std::string_view flag) {
  std::map<uint32_t, KvDtype> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return invalid_argument(std::string(flag) + ": \"" + std::string(item) +
                              "\" is not LAYER=FORMAT or FIRST-LAST=FORMAT");
    const std::string_view layers = item.substr(0, eq);
    Result<KvDtype> dtype = parse_kv_dtype(item.substr(eq + 1));
    if (!dtype.is_ok())
      return invalid_argument(std::string(flag) + ": " + dtype.status().message());
    const size_t dash = layers.find('-');
    KVS_ASSIGN_OR_RETURN(const uint32_t first, parse_layer(layers.substr(0, dash), item, flag));
    uint32_t last = first;
    if (dash != std::string_view::npos) {
      KVS_ASSIGN_OR_RETURN(last, parse_layer(layers.substr(dash + 1), item, flag));
      if (last < first)
        return invalid_argument(std::string(flag) + ": the range in \"" + std::string(item) +
                                "\" runs backwards");
    }
    for (uint32_t l = first; l <= last; ++l)
      if (!out.emplace(l, *dtype).second)
        return invalid_argument(std::string(flag) + ": layer " + std::to_string(l) +
                                " is given twice");
  }
  if (!text.empty() && text.back() == ',')
    return invalid_argument(std::string(flag) + ": the list ends with a comma");
  return out;
}

Result<KvLayerFormats> parse_kv_layer_flags(std::string_view k_text, std::string_view v_text) {
  KvLayerFormats f;
  KVS_ASSIGN_OR_RETURN(f.k, parse_kv_layer_formats(k_text, kKLayersFlag));
  KVS_ASSIGN_OR_RETURN(f.v, parse_kv_layer_formats(v_text, kVLayersFlag));
  return f;
}

Status check_kv_layer_formats(const KvLayerFormats& f, uint32_t layers, KvDtype pool_k) {
  KVS_RETURN_IF_ERROR(check_layers_exist(f.k, layers, kKLayersFlag));
  KVS_RETURN_IF_ERROR(check_layers_exist(f.v, layers, kVLayersFlag));
  for (const auto& [layer, dtype] : f.k) {
    const std::string where = std::string(kKLayersFlag) + ": layer " + std::to_string(layer);
    if (kv_channel_group_tokens(dtype) != kv_channel_group_tokens(pool_k)) {
      const auto grouping = [](KvDtype d) {
        const uint32_t g = kv_channel_group_tokens(d);
        return g == 0 ? std::string("per token")
                      : "per channel over " + std::to_string(g) + " tokens";
      };
      return invalid_argument(where + ": " + kv_dtype_name(dtype) + " quantizes keys " +
                              grouping(dtype) + ", the pool's " + kv_dtype_name(pool_k) + " " +
                              grouping(pool_k) +
                              "; a layer's keys must be grouped like the pool's (for example "
                              "int4_chan with int2_chan, int4_chan64 with int2_chan64)");
    }
  }
  for (const auto& [layer, dtype] : f.v) {
    const std::string where = std::string(kVLayersFlag) + ": layer " + std::to_string(layer);
    if (kv_dtype_per_channel(dtype))
      return invalid_argument(where + ": " + kv_dtype_name(dtype) +
                              " quantizes keys per channel; it is a K format only");
  }
  return Status::ok();
}

std::string kv_layer_formats_text(const KvLayerFormats& f, char role) {
  const std::map<uint32_t, KvDtype>& m = role == 'k' ? f.k : f.v;
  std::string out;
  for (const auto& [layer, dtype] : m) {
    if (!out.empty()) out += ',';
    out += std::to_string(layer) + "=" + kv_dtype_name(dtype);
  }
  return out;
}

std::string kv_layer_formats_suffix(const KvLayerFormats& f) {
  if (f.empty()) return "";
  std::string out = " + layers";
  if (!f.k.empty()) out += " K " + kv_layer_formats_text(f, 'k');
  if (!f.v.empty())
    out += std::string(f.k.empty() ? "" : ";") + " V " + kv_layer_formats_text(f, 'v');
  return out;
}

}  // namespace kvs
