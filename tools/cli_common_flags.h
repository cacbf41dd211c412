// The flags that several subcommands take, each declared here once: its names, its value type,
// whether --help shows its default, and its help text, one text per role the flag plays (the
// engine this process runs, the simulated engines, or the capacity planner's inputs). A
// subcommand says which role; it never spells the flag itself, so generate, perplexity, serve,
// plan and simulate cannot drift apart on a name, a default shown or a description.
//
// Defaults are the values the flag variables hold when the flag is added (the subcommand's flag
// struct), shown as "=VALUE" where the role has one; where a default depends on other flags
// (simulate's --device) the help says it instead.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace kvs::cli {

enum class FlagRole {
  kEngine,           // generate, perplexity, serve: the engine this process runs
  kSimulatedEngine,  // simulate: each simulated replica's engine (some defaults follow --device)
  kPlanner,          // plan (and simulate's model and hardware flags): what the planner reads
};

// -m,--model and its positional spelling MODEL (`kvserve serve MODEL`, as vLLM; both given and
// different is an error). kEngine: a GGUF file; kPlanner: a catalog name or Hugging Face id,
// config.json, directory or GGUF.
void add_model_flag(CLI::App& cmd, std::string* model, FlagRole role);
// --kv-cache-dtype, --kv-cache-dtype-k, --kv-cache-dtype-v (kPlanner also --kv-dtype, --k-dtype,
// --v-dtype); "auto" is f16 for the engine, the model's dtype for the planner.
void add_kv_cache_dtype_flags(CLI::App& cmd, std::string* both, std::string* k, std::string* v,
                              FlagRole role);
// --kv-cache-dtype-k-layers, --kv-cache-dtype-v-layers: layers whose K or V has its own format,
// "18=int4_chan,20=int4_chan" (quant/kv_layer_formats.h); every role.
void add_kv_layer_dtype_flags(CLI::App& cmd, std::string* k_layers, std::string* v_layers,
                              FlagRole role);
// --kv-cache-memory: the engine's pool (kEngine, kSimulatedEngine) or a pool to show (kPlanner).
void add_kv_cache_memory_flag(CLI::App& cmd, std::string* bytes, FlagRole role);
// --block-size: tokens per KV block (kPlanner: 0 = contiguous).
void add_block_size_flag(CLI::App& cmd, uint32_t* tokens, FlagRole role);
// --max-num-batched-tokens: the step's token budget (kEngine, kSimulatedEngine) ...
void add_max_num_batched_tokens_flag(CLI::App& cmd, uint32_t* tokens, FlagRole role);
// ... or the step the planner sizes windowed layers for (kPlanner).
void add_max_num_batched_tokens_flag(CLI::App& cmd, uint64_t* tokens, FlagRole role);
// --max-num-seqs (kEngine, kSimulatedEngine).
void add_max_num_seqs_flag(CLI::App& cmd, uint32_t* seqs, FlagRole role);
// --kv-recent-window: each running sequence's newest tokens in f16 beside the pool
// (quant/recent_window.h); kEngine runs it, kSimulatedEngine simulates the engine with it,
// kPlanner counts its bytes in every request and in the engine's pool.
void add_kv_recent_window_flag(CLI::App& cmd, uint32_t* tokens, FlagRole role);
// --kv-attention-sink: position 0's K and V in f16 for every query (quant/attention_sink.h);
// kEngine runs it, kSimulatedEngine counts its rows in the engine's pool and refuses the hits the
// engine refuses, kPlanner counts its rows in every request and in the engine's pool.
void add_kv_attention_sink_flag(CLI::App& cmd, bool* on, FlagRole role);
// --kv-recent-window-dtype f16|int8 (the window's rows; parse_recent_window_dtype reads it).
void add_kv_recent_window_dtype_flag(CLI::App& cmd, std::string* dtype, FlagRole role);
// --NAME / --no-NAME: a boolean set on or off, the last one given winning; --help shows the
// default (*value when added) as "(default: on)" / "(default: off)" after `help`.
void add_on_off_flags(CLI::App& cmd, const std::string& name, bool* value, const std::string& help,
                      const std::string& off_help);
// --enable-prefix-caching / --no-enable-prefix-caching.
void add_prefix_caching_flag(CLI::App& cmd, bool* enabled);
// --max-model-len (0: the model's context).
void add_max_model_len_flag(CLI::App& cmd, uint32_t* tokens);
// --preemption-mode and --swap-space (kEngine, kSimulatedEngine: per replica).
void add_preemption_flags(CLI::App& cmd, std::string* mode, std::string* swap_space, FlagRole role);
// --kv-offload-memory and --kv-offload-disk-bytes: the engine's host and disk tiers (kEngine) or
// tiers whose capacity the planner reports (kPlanner).
void add_kv_offload_memory_flag(CLI::App& cmd, std::string* bytes, FlagRole role);
void add_kv_offload_disk_bytes_flag(CLI::App& cmd, std::string* bytes, FlagRole role);
// --step-log FILE (kEngine: wall-clock times; kSimulatedEngine: virtual time).
void add_step_log_flag(CLI::App& cmd, std::string* path, FlagRole role);
// --config FILE: a YAML file of flag values, keys the long flag names (max-model-len: 4096), as
// vLLM's --config; flags on the command line win (cli_config_file.h, docs/serving.md). Add it
// last; it takes the subcommand's parse-complete callback, which applies the file.
void add_config_flag(CLI::App& cmd);

}  // namespace kvs::cli
