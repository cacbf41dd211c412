// KvLayerFormats: the layers whose K or V is stored in another format than the pool's
// (`--kv-cache-dtype-k-layers 18=int4_chan,20=int4_chan --kv-cache-dtype-v-layers 1=int4_had`).
//
// Quantization error is not spread evenly over a model's layers: on SmolLM2 most of a 2-bit
// format's loss comes from the keys of two layers and the values of one (docs/kv-quantization.md,
// "Per-layer formats"). Giving those layer parts more bits costs a few bytes per token and takes
// half of the loss, the layer-wise precision of KVTuner and similar work. Every other layer keeps
// the format of `--kv-cache-dtype[-k|-v]`.
//
// A block still holds every layer of its tokens, each layer in its own formats
// (quant/paged_kv_layout.h: per-layer slices); the bytes per token are the sum over layers
// (kvcache/kv_geometry.h). A layer's K format must quantize keys in groups of the same length as
// the pool's (both per vector, or both per channel over the same tokens): the partly filled
// groups' keys (quant/key_tails.h), a prefix hit's whole groups and the block size's multiple are
// the pool's, one length for every layer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/status.h"
#include "quant/kv_format.h"

namespace kvs {

struct KvLayerFormats {
  std::map<uint32_t, KvDtype> k;  // layer -> its K format, where not the pool's
  std::map<uint32_t, KvDtype> v;  // layer -> its V format

  [[nodiscard]] bool empty() const { return k.empty() && v.empty(); }
  // The K (V) format of `layer`: its own, or `pool` (the pool's) when it has none.
  [[nodiscard]] KvDtype k_at(uint32_t layer, KvDtype pool) const;
  [[nodiscard]] KvDtype v_at(uint32_t layer, KvDtype pool) const;
  friend bool operator==(const KvLayerFormats&, const KvLayerFormats&) = default;
};

inline constexpr const char* kKLayersFlag = "--kv-cache-dtype-k-layers";
inline constexpr const char* kVLayersFlag = "--kv-cache-dtype-v-layers";

// Parses one role's flag text: comma-separated `LAYER=FORMAT` or `FIRST-LAST=FORMAT` items
// ("18=int4_chan,20=int4_chan", "0-3=int8"), format names as parse_kv_dtype takes them. An empty
// text is no layer. invalid_argument naming `flag` for a malformed item, a layer given twice or a
// range that runs backwards.
[[nodiscard]] Result<std::map<uint32_t, KvDtype>> parse_kv_layer_formats(std::string_view text,
                                                                         std::string_view flag);

// Both flags' texts (kKLayersFlag's, kVLayersFlag's), each as parse_kv_layer_formats.
[[nodiscard]] Result<KvLayerFormats> parse_kv_layer_flags(std::string_view k_text,
                                                          std::string_view v_text);

// ok when every listed layer exists (< layers), no V format is per channel (those are keys only)
// and every K format groups keys like `pool_k` (kv_channel_group_tokens equal). invalid_argument
// naming the flag and the layer otherwise.
[[nodiscard]] Status check_kv_layer_formats(const KvLayerFormats& formats, uint32_t layers,
                                            KvDtype pool_k);

// The flags' text, canonical (sorted, one item per layer): "18=int4_chan,20=int4_chan" for
// `role` 'k' or 'v'; "" when that role lists no layer.
[[nodiscard]] std::string kv_layer_formats_text(const KvLayerFormats& formats, char role);
// For a person: " + layers K 18=int4_chan,20=int4_chan; V 1=int4_had" (the roles that list
// layers), "" when none does; appended to a "K/V" format line.
[[nodiscard]] std::string kv_layer_formats_suffix(const KvLayerFormats& formats);

}  // namespace kvs
