// gpu_presets: the memory of well-known accelerators for `kvserve plan --gpu NAME`.
//
// Vendors write "80GB" but HBM capacity is a power of two per stack: an "H100 80GB" has 80 GiB
// (85.9 x 10^9 B) of which the driver shows ~79.6 GiB. Presets therefore hold the marketed number
// as GiB, say so in their note, and leave the driver's reserve to --gpu-memory-utilization.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace kvs {

struct GpuPreset {
  const char* name;       // "H100-80GB"
  const char* aliases;    // comma-separated other spellings, lower case: "h100,h100-sxm"
  uint64_t memory_bytes;  // per GPU
  const char* note;       // what the number is and where it came from
};

[[nodiscard]] std::span<const GpuPreset> gpu_presets();
// Case-insensitive; spaces, '_' and '-' are ignored ("h100 80gb" == "H100-80GB").
[[nodiscard]] Result<GpuPreset> find_gpu_preset(const std::string& name);

}  // namespace kvs
