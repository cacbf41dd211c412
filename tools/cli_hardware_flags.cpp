#include "tools/cli_hardware_flags.h"

namespace kvs::cli {

void add_hardware_flags(CLI::App* cmd, HardwareArgs* a) {
  cmd->add_option("-m,--model", a->model,
                  "catalog name (--list-models), config.json, a directory with one, or a GGUF");
  cmd->add_option("--kv-dtype,--kv-cache-dtype", a->kv_dtype,
                  "KV format for K and V: auto (the model's dtype), f32, f16, bf16, fp8 "
                  "(fp8_e4m3), fp8_e5m2, int8, int4, q8_0, q4_0")
      ->capture_default_str();
  cmd->add_option("--k-dtype,--kv-cache-dtype-k", a->k_dtype, "K format (overrides --kv-dtype)");
  cmd->add_option("--v-dtype,--kv-cache-dtype-v", a->v_dtype, "V format (overrides --kv-dtype)");
  cmd->add_option("--tp", a->tp, "tensor-parallel GPUs")->capture_default_str();
  cmd->add_option("--gpu", a->gpu, "GPU preset (--list-gpus); default H100-80GB");
  cmd->add_option("--memory", a->memory, "memory per GPU instead of a preset: 80GB, 75GiB");
  cmd->add_option("--gpu-memory-utilization", a->utilization,
                  "fraction of GPU memory the engine may use")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--weights", a->weights,
                  "weights of the whole model (default: catalog parameters x dtype, or the "
                  "GGUF's tensor bytes)");
  cmd->add_option("--weight-dtype", a->weight_dtype,
                  "dtype for parameters x bytes: bf16, f16, fp8, int8, int4");
  cmd->add_option("--workspace", a->workspace,
                  "per-GPU memory for activations, CUDA graphs, fragmentation")
      ->capture_default_str();
}

}  // namespace kvs::cli
