#include "sim/device_model.h"

#include "core/json_nesting.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "planner/gpu_presets.h"

namespace kvs {

namespace {

constexpr double kT = 1e12;  // TFLOP/s, TB/s
constexpr double kG = 1e9;   // GB/s

struct Roofline {
  const char* preset;  // GpuPreset::name
  double bf16_tflops;  // dense
  double fp8_tflops;   // dense; 0 = no fp8 tensor cores
  double hbm_tbs;
  double link_gbs;  // per direction between TP ranks
  double host_gbs;  // PCIe per direction, effective
  double compute_eff;
  double memory_eff;
  const char* source;
};

// Datasheet peaks (dense) and assumed efficiencies: GEMM-heavy serving reaches ~60-70% of the
// dense peak on NVIDIA datacenter parts and less on MI300-class parts; streaming weights and KV
// reaches ~80-90% of HBM bandwidth. docs/simulate.md checks these against published
// measurements (vLLM, Llama-3.1-8B).
constexpr Roofline kRooflines[] = {
    {"H100-80GB", 989, 1979, 3.35, 450, 50, 0.65, 0.85,
     "H100 SXM datasheet: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3, NVLink 4 450 GB/s/direction"},
    {"H100-NVL-94GB", 835, 1671, 3.9, 300, 50, 0.65, 0.85,
     "H100 NVL datasheet: 835 TFLOP/s bf16 dense, 3.9 TB/s HBM3, NVLink bridge 300 GB/s/dir"},
    {"H200-141GB", 989, 1979, 4.8, 450, 50, 0.65, 0.85,
     "H200 SXM datasheet: 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e, NVLink 4 450 GB/s/direction"},
    {"A100-40GB", 312, 0, 1.555, 300, 25, 0.7, 0.85,
     "A100 40GB SXM datasheet: 312 TFLOP/s bf16 dense, 1.555 TB/s HBM2, NVLink 3 300 GB/s/dir"},
    {"A100-80GB", 312, 0, 2.039, 300, 25, 0.7, 0.85,
     "A100 80GB SXM datasheet: 312 TFLOP/s bf16 dense, 2.039 TB/s HBM2e, NVLink 3 300 GB/s/dir"},
    {"L4", 121, 242, 0.3, 25, 25, 0.6, 0.8,
     "L4 datasheet: 121 TFLOP/s bf16 dense, 300 GB/s GDDR6, PCIe 4 only"},
    {"L40S", 362, 733, 0.864, 25, 25, 0.6, 0.8,
     "L40S datasheet: 362 TFLOP/s bf16 dense, 864 GB/s GDDR6, PCIe 4 only"},
    {"A10G", 125, 0, 0.6, 25, 25, 0.6, 0.8,
     "A10 datasheet: 125 TFLOP/s bf16 dense, 600 GB/s GDDR6, PCIe 4 only (A10G: same memory)"},
    {"RTX-4090", 165, 330, 1.008, 25, 25, 0.6, 0.8,
     "RTX 4090 whitepaper: 165 TFLOP/s f16 dense (f32 accumulate), 1,008 GB/s GDDR6X, PCIe 4"},
    {"MI300X", 1307, 2615, 5.3, 448, 50, 0.45, 0.75,
     "MI300X datasheet: 1,307 TFLOP/s bf16 dense, 5.3 TB/s HBM3, Infinity Fabric 448 GB/s/dir"},
    {"MI325X", 1307, 2615, 6.0, 448, 50, 0.45, 0.75,
     "MI325X datasheet: 1,307 TFLOP/s bf16 dense, 6.0 TB/s HBM3e, Infinity Fabric 448 GB/s/dir"},
    {"B200", 2250, 4500, 8.0, 900, 50, 0.6, 0.85,
     "HGX B200 datasheet: 2.25 PFLOP/s bf16 dense, 8 TB/s HBM3e, NVLink 5 900 GB/s/direction"},
    {"GB200", 2500, 5000, 8.0, 900, 50, 0.6, 0.85,
     "GB200 NVL72 datasheet: 2.5 PFLOP/s bf16 dense per GPU, 8 TB/s HBM3e, NVLink 5 900 GB/s/dir"},
};

// Assumed engine costs on a GPU: a step's scheduling, launches (CUDA graphs) and sampling, and
// per sequence the output processing a serving engine does on the CPU.
constexpr double kGpuStepOverhead = 1.5e-3;
constexpr double kGpuSequenceOverhead = 20e-6;
constexpr double kAllReduceLatency = 10e-6;

Result<double> positive(const nlohmann::json& j, const char* key, const std::string& origin,
                        bool required) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (required) return invalid_argument(origin + ": '" + key + "' is missing");
    return 0.0;
  }
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
    return invalid_argument(origin + ": '" + key + "' must be a number >= 0");
  return it->get<double>();
}

Status parse_rate_curve(const nlohmann::json& j, const std::string& origin, DeviceModel* d) {
  const auto it = j.find("linear_flops_by_tokens");
  if (it == j.end()) return Status::ok();
  const std::string bad = origin +
                          ": 'linear_flops_by_tokens' must be [[tokens, FLOP/s], ...] with "
                          "tokens >= 1 strictly increasing and FLOP/s > 0";
  if (!it->is_array()) return invalid_argument(bad);
  for (const nlohmann::json& p : *it) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number())
      return invalid_argument(bad);
    const double tokens = p[0].get<double>(), rate = p[1].get<double>();
    if (!std::isfinite(tokens) || !std::isfinite(rate) || tokens < 1 || rate <= 0 ||
        (!d->linear_flops_by_tokens.empty() && tokens <= d->linear_flops_by_tokens.back().first))
      return invalid_argument(bad);
    d->linear_flops_by_tokens.emplace_back(tokens, rate);
  }
  return Status::ok();
}

}  // namespace

double linear_flops_at(const DeviceModel& d, double tokens, bool fp8_weights) {
  const auto& c = d.linear_flops_by_tokens;
  if (c.empty()) {
    const double peak = fp8_weights && d.peak_flops_fp8 > 0 ? d.peak_flops_fp8 : d.peak_flops;
    return peak * d.compute_efficiency;
  }
  if (tokens <= c.front().first) return c.front().second;
  if (tokens >= c.back().first) return c.back().second;
  size_t i = 1;
  while (c[i].first < tokens) ++i;
  const double x0 = std::log(c[i - 1].first), x1 = std::log(c[i].first);
  const double f = (std::log(tokens) - x0) / (x1 - x0);
  return c[i - 1].second + f * (c[i].second - c[i - 1].second);
}

Result<DeviceModel> gpu_device_model(const std::string& name) {
  KVS_ASSIGN_OR_RETURN(const GpuPreset preset, find_gpu_preset(name));
  for (const Roofline& r : kRooflines) {
    if (std::string(r.preset) != preset.name) continue;
    DeviceModel d;
    d.name = preset.name;
    d.description = r.source;
    d.peak_flops = r.bf16_tflops * kT;
    d.peak_flops_fp8 = r.fp8_tflops * kT;
    d.memory_bandwidth = r.hbm_tbs * kT;
    d.compute_efficiency = r.compute_eff;
    d.memory_efficiency = r.memory_eff;
    d.step_overhead_s = kGpuStepOverhead;
    d.sequence_overhead_s = kGpuSequenceOverhead;
    d.link_bandwidth = r.link_gbs * kG;
    d.allreduce_latency_s = kAllReduceLatency;
    d.host_bandwidth = r.host_gbs * kG;
    return d;
  }
  return unimplemented(std::string("no roofline for GPU preset ") + preset.name);
}

Result<DeviceModel> parse_device_json(const std::string& text, const std::string& origin) {
  KVS_RETURN_IF_ERROR(check_json_nesting(text, origin));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(origin + ": not a JSON object (write one with bench/sim_calibrate)");
  DeviceModel d;
  d.name = j.value("device", std::string("cpu"));
  d.description = j.value("description", origin);
  KVS_ASSIGN_OR_RETURN(d.peak_flops, positive(j, "linear_flops_per_s", origin, true));
  KVS_ASSIGN_OR_RETURN(d.attention_flops, positive(j, "attention_flops_per_s", origin, false));
  KVS_ASSIGN_OR_RETURN(d.memory_bandwidth,
                       positive(j, "memory_bandwidth_bytes_per_s", origin, true));
  KVS_ASSIGN_OR_RETURN(d.step_overhead_s, positive(j, "step_overhead_s", origin, false));
  KVS_ASSIGN_OR_RETURN(d.sequence_overhead_s, positive(j, "sequence_overhead_s", origin, false));
  KVS_RETURN_IF_ERROR(parse_rate_curve(j, origin, &d));
  if (d.peak_flops <= 0 || d.memory_bandwidth <= 0)
    return invalid_argument(origin +
                            ": linear_flops_per_s and memory_bandwidth_bytes_per_s "
                            "must be positive");
  return d;
}

Result<DeviceModel> read_device_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return not_found("cannot open device file " + path +
                     " (run build/bench/sim_calibrate to write one)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_device_json(ss.str(), path);
}

std::string device_model_json(const DeviceModel& d, const std::string& extra) {
  nlohmann::ordered_json j;
  j["device"] = d.name;
  j["description"] = d.description;
  j["linear_flops_per_s"] = d.peak_flops;
  j["attention_flops_per_s"] = d.attention_flops;
  j["memory_bandwidth_bytes_per_s"] = d.memory_bandwidth;
  j["step_overhead_s"] = d.step_overhead_s;
  j["sequence_overhead_s"] = d.sequence_overhead_s;
  if (!d.linear_flops_by_tokens.empty()) {
    nlohmann::ordered_json curve = nlohmann::ordered_json::array();
    for (const auto& [tokens, rate] : d.linear_flops_by_tokens) curve.push_back({tokens, rate});
    j["linear_flops_by_tokens"] = curve;
  }
  if (!extra.empty() && check_json_nesting(extra, "extra").is_ok()) {
    const nlohmann::ordered_json e =
        nlohmann::ordered_json::parse(extra, nullptr, /*allow_exceptions=*/false);
    if (e.is_object())
      for (auto it = e.begin(); it != e.end(); ++it) j[it.key()] = it.value();
  }
  return j.dump(2) + "\n";
}

}  // namespace kvs
