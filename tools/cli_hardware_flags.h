// Flags shared by `kvserve plan` and `kvserve simulate` for the model and the hardware: --model,
// --kv-dtype (--kv-cache-dtype), --k-dtype, --v-dtype, --tp, --gpu, --memory,
// --gpu-memory-utilization, --weights, --weight-dtype, --workspace. They fill a HardwareArgs
// (planner/plan_hardware.h), which both commands resolve the same way. --model and the KV
// formats are the shared declarations of cli_common_flags.h in their planner role.
#pragma once

#include <CLI/CLI.hpp>

#include "planner/plan_hardware.h"

namespace kvs::cli {

void add_hardware_flags(CLI::App* cmd, HardwareArgs* args);

}  // namespace kvs::cli
