#include "tools/cli_hardware_flags.h"

#include "tools/cli_common_flags.h"

namespace kvs::cli {

void add_hardware_flags(CLI::App* cmd, HardwareArgs* a) {
  add_model_flag(*cmd, &a->model, FlagRole::kPlanner);
  add_kv_cache_dtype_flags(*cmd, &a->kv_dtype, &a->k_dtype, &a->v_dtype, FlagRole::kPlanner);
  add_kv_layer_dtype_flags(*cmd, &a->k_layers, &a->v_layers, FlagRole::kPlanner);
  cmd->add_option("--tp", a->tp, "tensor-parallel GPUs")->capture_default_str();
  cmd->add_option("--gpu", a->gpu, "GPU preset (--list-gpus); default H100-80GB");
  cmd->add_option("--memory", a->memory,
                  "memory per GPU: 80GB, 75GiB; with --gpu, replaces the preset's memory "
                  "and keeps its compute and bandwidth");
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
