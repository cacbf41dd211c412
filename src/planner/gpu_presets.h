// gpu_presets: the memory of well-known accelerators for `kvserve plan --gpu NAME`.
//
// A preset holds the total memory the device reports: what nvidia-smi shows as its total (and
// cudaMemGetInfo returns as total; rocm-smi's "VRAM Total Memory" for AMD), because that is what
// an engine sizes its pool from: `--gpu-memory-utilization` is a fraction of it (vLLM:
// requested_memory = total_memory x gpu_memory_utilization). The marketed figure ("H100 80GB",
// "H200 141GB") stays in the description: it is neither GB nor GiB of usable memory (an H100 SXM
// reports 81,559 MiB = 79.65 GiB = 85.52 GB). Every preset names where its number comes from.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace kvs {

struct GpuPreset {
  const char* name;       // "H100-80GB"
  const char* aliases;    // comma-separated other spellings, lower case: "h100,h100-sxm"
  uint64_t memory_bytes;  // per GPU: the total the device reports
  const char* note;       // what the number is, with the marketed capacity
  const char* source;     // where the number comes from
};

[[nodiscard]] std::span<const GpuPreset> gpu_presets();
// Case-insensitive; spaces, '_' and '-' are ignored ("h100 80gb" == "H100-80GB").
[[nodiscard]] Result<GpuPreset> find_gpu_preset(const std::string& name);

}  // namespace kvs
