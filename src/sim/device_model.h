// DeviceModel: the few numbers the step-time model needs about one accelerator (or this machine's
// CPU): peak dense FLOP/s, memory bandwidth, how much of each a serving engine reaches, a fixed
// cost per step and per sequence, and the links tensor parallelism and swapping use.
//
// GPU presets (the planner's names, gpu_presets.h) carry datasheet peaks (dense, no sparsity)
// and efficiency factors that are assumptions, documented in docs/simulate.md with the published
// numbers they were checked against. The `cpu` device is measured on this machine by
// bench/sim_calibrate (efficiencies 1: its rates are already effective ones) and read from a
// JSON file.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvs {

struct DeviceModel {
  std::string name;           // "H100-80GB", "cpu"
  std::string description;    // where the numbers come from
  double peak_flops = 0;      // dense bf16/f16 FLOP/s (GEMM)
  double peak_flops_fp8 = 0;  // dense fp8 FLOP/s (fp8 weights); 0 = none (use peak_flops)
  // Attention's FLOP/s when it differs from the GEMM rate (measured for the CPU); 0 = the same.
  double attention_flops = 0;
  double memory_bandwidth = 0;  // bytes/s
  double compute_efficiency = 1;
  double memory_efficiency = 1;
  double step_overhead_s = 0;      // per step: scheduling, launches, sampling setup
  double sequence_overhead_s = 0;  // per sequence in the step: sampling, bookkeeping
  double link_bandwidth = 0;       // bytes/s per direction between TP ranks (0 = no TP link)
  double allreduce_latency_s = 0;  // fixed cost of one all-reduce
  double host_bandwidth = 0;       // bytes/s device <-> host (swap); 0 = not modelled
  // The linear layers' effective FLOP/s by tokens in the step, where it depends on them (the
  // CPU's matmul kernels reuse each unpacked weight tile for as many tokens as the step has, so
  // a step of 2 tokens runs far below one of 64): (tokens, FLOP/s) points, tokens strictly
  // increasing, interpolated linearly in log(tokens), flat beyond the ends. Empty = peak_flops x
  // compute_efficiency at every size (the GPU presets: small steps are memory-bound there).
  std::vector<std::pair<double, double>> linear_flops_by_tokens;
};

// The linear layers' FLOP/s for a step of `tokens` tokens (see linear_flops_by_tokens).
[[nodiscard]] double linear_flops_at(const DeviceModel& d, double tokens, bool fp8_weights);

// The preset's roofline (find_gpu_preset spelling, e.g. "H100", "h200-141gb").
[[nodiscard]] Result<DeviceModel> gpu_device_model(const std::string& preset);

// The calibrated CPU device: a JSON object written by device_model_json (keys below).
[[nodiscard]] Result<DeviceModel> read_device_file(const std::string& path);
[[nodiscard]] Result<DeviceModel> parse_device_json(const std::string& text,
                                                    const std::string& origin);
// {"device", "description", "linear_flops_per_s", "attention_flops_per_s",
//  "memory_bandwidth_bytes_per_s", "step_overhead_s", "sequence_overhead_s",
//  optional "linear_flops_by_tokens": [[tokens, FLOP/s], ...], ...extra}
// `extra` is a JSON object whose members are appended (calibration details); may be "".
[[nodiscard]] std::string device_model_json(const DeviceModel& d, const std::string& extra);

}  // namespace kvs
