#include "planner/gpu_presets.h"

#include <array>
#include <cctype>

namespace kvs {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// nvidia-smi totals collected by Modal for its GPU fleet (H100 81559MiB, A100 80GB 81920MiB,
// A100 40GB 40960MiB, A10 23028MiB, L40S 46068MiB, L4 23034MiB).
constexpr const char* kModal =
    "nvidia-smi totals in https://github.com/modal-labs/modal-client/pull/2797";

constexpr std::array<GpuPreset, 13> kPresets = {{
    {"H100-80GB", "h100,h100sxm,h100sxm80gb,h100pcie,h10080gbhbm3", 81'559 * kMiB,
     "NVIDIA H100 SXM/PCIe \"80GB\" (80 GiB of HBM3): the device reports 81,559 MiB",
     "nvidia-smi on H100 80GB HBM3: https://github.com/modal-labs/modal-client/pull/2797, "
     "https://github.com/NVIDIA/nccl/issues/1264"},
    {"H100-NVL-94GB", "h100nvl,h100nvl94", 95'830 * kMiB,
     "NVIDIA H100 NVL \"94GB\" per GPU (HBM3): the device reports 95,830 MiB",
     "nvidia-smi on H100 NVL: https://github.com/NVIDIA/gpu-admin-tools/issues/4"},
    {"H200-141GB", "h200,h200sxm,h200nvl", 143'771 * kMiB,
     "NVIDIA H200 \"141GB\" (HBM3e): the device reports 143,771 MiB",
     "nvidia-smi total on H200 as quoted in issue 14 (the same 143771MiB appears in many "
     "public nvidia-smi logs; no single citable thread found)"},
    {"A100-40GB", "a10040,a100sxm40gb,a100pcie40gb", 40'960 * kMiB,
     "NVIDIA A100 \"40GB\" (HBM2): the device reports 40,960 MiB", kModal},
    {"A100-80GB", "a100,a10080,a100sxm80gb,a100pcie80gb", 81'920 * kMiB,
     "NVIDIA A100 \"80GB\" (HBM2e): the device reports 81,920 MiB", kModal},
    {"L4", "l424gb", 23'034 * kMiB,
     "NVIDIA L4 \"24GB\" (GDDR6, ECC on): the device reports 23,034 MiB", kModal},
    {"L40S", "l40s48gb", 46'068 * kMiB,
     "NVIDIA L40S \"48GB\" (GDDR6, ECC on): the device reports 46,068 MiB", kModal},
    {"A10G", "a10,a10g24gb", 23'028 * kMiB,
     "NVIDIA A10/A10G \"24GB\" (GDDR6): the device reports 23,028 MiB",
     "nvidia-smi on A10 (https://github.com/modal-labs/modal-client/pull/2797) and on AWS "
     "A10G (https://github.com/NVIDIA/DCGM/issues/232): 23028MiB"},
    {"RTX-4090", "4090,rtx409024gb,geforcertx4090", 24'564 * kMiB,
     "NVIDIA GeForce RTX 4090 \"24GB\" (GDDR6X): the device reports 24,564 MiB",
     "nvidia-smi on RTX 4090: https://github.com/vllm-project/vllm/issues/7553"},
    {"MI300X", "mi300x192gb,mi300", 196'288 * kMiB,
     "AMD Instinct MI300X \"192GB\" (HBM3): the device reports 196,288 MiB "
     "(205,822,885,888 B)",
     "rocm-smi --showmeminfo vram on MI300X, VRAM Total Memory (B): 205822885888 (public "
     "rocm-smi logs; no single citable thread found)"},
    {"MI325X", "mi325x256gb", 256 * kGiB,
     "AMD Instinct MI325X \"256GB\" (HBM3e): the marketed capacity read as 256 GiB; no "
     "reported total found, so this one is the marketing figure",
     "AMD MI325X product page (256 GB HBM3E); no rocm-smi total found"},
    {"B200", "b200180gb,hgxb200,dgxb200", 183'359 * kMiB,
     "NVIDIA B200 \"180GB\" in HGX/DGX B200 (HBM3e; announced as 192 GB): the device reports "
     "183,359 MiB",
     "nvidia-smi on 8x B200: https://github.com/NVIDIA/TensorRT-LLM/issues/10278"},
    {"GB200", "gb200b200", 189'471 * kMiB,
     "NVIDIA B200 \"186GB\" in GB200 NVL72 (HBM3e): the device reports 189,471 MiB",
     "nvidia-smi total on GB200 (the same 189471MiB appears in many public nvidia-smi logs; no "
     "single citable thread found)"},
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
