// Flags and helpers shared by the subcommands that run the model (generate, perplexity, serve).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/loaded_model.h"

namespace kvs::cli {

struct EngineFlags {
  std::string model;
  std::string kv_cache_memory = "512MiB";
  uint32_t block_size = 16;
  std::string kv_cache_dtype = "f16";
  std::string kv_cache_dtype_k;
  std::string kv_cache_dtype_v;
  std::string kv_cache_dtype_k_layers;
  std::string kv_cache_dtype_v_layers;
  int threads = 0;
  uint32_t max_num_batched_tokens = 512;
  uint32_t max_num_seqs = 64;
  uint32_t kv_recent_window = 0;
  std::string kv_recent_window_dtype = "f16";
  bool kv_attention_sink = false;
  bool enable_prefix_caching = true;
  uint32_t max_model_len = 0;
  std::string kv_offload_memory = "0";
  std::string kv_offload_dir;
  std::string kv_offload_disk_bytes = "4GiB";
  std::string kv_offload_policy = "write-back";
  uint32_t kv_offload_disk_admit = 0;
  uint32_t kv_offload_extent_blocks = 16;
  std::string kv_offload_dtype = "same";
  std::vector<std::string> kv_remote;  // redis://HOST:PORT[/DB], repeatable
  uint32_t kv_remote_ttl = 0;
  uint32_t kv_remote_timeout_ms = 50;
  std::string kv_tier_secret_file;
};

// Adds -m, --kv-cache-memory, --block-size, --kv-cache-dtype(-k/-v), -t, --max-num-batched-tokens,
// --max-num-seqs, --kv-recent-window, --[no-]enable-prefix-caching, --max-model-len, the
// --kv-offload-* tiers and the
// --kv-remote-* tier (the flags other subcommands share too come from cli_common_flags.h).
void add_engine_flags(CLI::App* cmd, EngineFlags* flags);

// Loads the model named by flags.model (or the default model); fails with one clear line.
std::unique_ptr<LoadedModel> load_model_or_fail(const EngineFlags& flags);
// Builds the engine config (parses sizes and dtypes); fails with one clear line.
EngineConfig engine_config_or_fail(const EngineFlags& flags, const LoadedModel& model);
std::unique_ptr<Engine> create_engine_or_fail(LoadedModel& model, const EngineConfig& config);

}  // namespace kvs::cli
