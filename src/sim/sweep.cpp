#include "sim/sweep.h"

#include <string_view>

#include "quant/kv_layer_formats.h"

namespace kvs {

namespace {

// The keys whose one value is itself a comma-separated list (the per-layer format flags, named
// without their "--"): their values are separated by ';'.
bool value_is_a_list(std::string_view key) {
  return key == std::string_view(kKLayersFlag).substr(2) ||
         key == std::string_view(kVLayersFlag).substr(2);
}

}  // namespace

Result<std::vector<SweepSettings>> expand_sweep(const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return invalid_argument("--sweep '" + spec + "': expected KEY=V1,V2 (e.g. gpus=1,2)");
    std::string key = spec.substr(0, eq);
    if (key.rfind("--", 0) == 0) key = key.substr(2);
    for (const auto& [k, v] : axes)
      if (k == key) return invalid_argument("--sweep " + key + " is given twice");
    const char separator = value_is_a_list(key) ? ';' : ',';
    std::vector<std::string> values;
    size_t start = eq + 1;
    for (;;) {
      const size_t comma = spec.find(separator, start);
      const std::string v = spec.substr(start, comma == std::string::npos ? comma : comma - start);
      if (v.empty()) return invalid_argument("--sweep '" + spec + "': an empty value");
      values.push_back(v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    axes.emplace_back(std::move(key), std::move(values));
  }
  std::vector<SweepSettings> out(1);
  for (const auto& [key, values] : axes) {
    std::vector<SweepSettings> next;
    for (const SweepSettings& prefix : out)
      for (const std::string& v : values) {
        SweepSettings s = prefix;
        s.emplace_back(key, v);
        next.push_back(std::move(s));
      }
    out = std::move(next);
  }
  return out;
}

}  // namespace kvs
