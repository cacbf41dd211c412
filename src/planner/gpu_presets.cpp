#include "planner/gpu_presets.h"

#include <array>
#include <cctype>

namespace kvs {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

constexpr std::array<GpuPreset, 13> kPresets = {{
    {"H100-80GB", "h100,h100sxm,h100sxm80gb,h100pcie,h10080gbhbm3", 80 * kGiB,
     "NVIDIA H100 SXM/PCIe: 80 GiB HBM3 (nvidia-smi shows 81,559 MiB)"},
    {"H100-NVL-94GB", "h100nvl,h100nvl94", 94 * kGiB,
     "NVIDIA H100 NVL: 94 GiB HBM3 per GPU (nvidia-smi shows ~95,830 MiB)"},
    {"H200-141GB", "h200,h200sxm,h200nvl", 141 * kGiB,
     "NVIDIA H200: 141 GiB HBM3e (nvidia-smi shows ~143,771 MiB)"},
    {"A100-40GB", "a10040,a100sxm40gb,a100pcie40gb", 40 * kGiB, "NVIDIA A100 40GB: 40 GiB HBM2"},
    {"A100-80GB", "a100,a10080,a100sxm80gb,a100pcie80gb", 80 * kGiB,
     "NVIDIA A100 80GB: 80 GiB HBM2e"},
    {"L4", "l424gb", 24 * kGiB, "NVIDIA L4: 24 GiB GDDR6 (ECC on: ~22.5 GiB visible)"},
    {"L40S", "l40s48gb", 48 * kGiB, "NVIDIA L40S: 48 GiB GDDR6"},
    {"A10G", "a10,a10g24gb", 24 * kGiB, "NVIDIA A10/A10G: 24 GiB GDDR6"},
    {"RTX-4090", "4090,rtx409024gb,geforcertx4090", 24 * kGiB,
     "NVIDIA GeForce RTX 4090: 24 GiB GDDR6X"},
    {"MI300X", "mi300x192gb,mi300", 192 * kGiB, "AMD Instinct MI300X: 192 GiB HBM3"},
    {"MI325X", "mi325x256gb", 256 * kGiB, "AMD Instinct MI325X: 256 GiB HBM3e"},
    {"B200", "b200180gb,hgxb200,dgxb200", 180 * kGiB,
     "NVIDIA B200 as shipped in HGX/DGX B200: 180 GiB HBM3e per GPU (announced as 192 GB)"},
    {"GB200", "gb200b200", 186 * kGiB, "NVIDIA B200 in GB200 NVL72: 186 GiB HBM3e per GPU"},
}};

std::string squash(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '_' && c != '-')
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

}  // namespace

std::span<const GpuPreset> gpu_presets() { return kPresets; }

Result<GpuPreset> find_gpu_preset(const std::string& name) {
  const std::string want = squash(name);
  for (const GpuPreset& p : kPresets) {
    if (squash(p.name) == want) return p;
    std::string aliases = p.aliases;
    size_t start = 0;
    while (start <= aliases.size()) {
      const size_t comma = aliases.find(',', start);
      const std::string a =
          aliases.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!a.empty() && a == want) return p;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::string all;
  for (const GpuPreset& p : kPresets) all += (all.empty() ? "" : ", ") + std::string(p.name);
  return not_found("unknown GPU '" + name + "' (presets: " + all + "; or give --memory)");
}

}  // namespace kvs
