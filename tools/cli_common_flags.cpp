#include "tools/cli_common_flags.h"

#include <cctype>
#include <cstdio>
#include <memory>

#include "core/check.h"
#include "quant/kv_format.h"
#include "quant/kv_layer_formats.h"
#include "quant/recent_window.h"
#include "tools/cli_commands.h"
#include "tools/cli_config_file.h"

namespace kvs::cli {
namespace {

// A subcommand asked for a flag in a role it has no text for: a bug of the subcommand.
[[noreturn]] void unknown_role(const char* flag) {
  std::fprintf(stderr, "%s: ", flag);
  ::kvs::detail::check_failed(__FILE__, __LINE__, "role", "no help for this flag in this role");
}

// The KV formats, as both roles' --kv-cache-dtype help lists them.
constexpr const char* kKvFormats =
    "f32, f16, bf16, fp8 (= fp8_e4m3, per-tensor scale 1.0, saturating), fp8_e5m2, fp8_e4m3_dyn "
    "(f16 scale per token and head), int8 (f16 scale per token and head), int8_had (int8 after a "
    "Hadamard rotation), int4 (f16 scale per 32 elements), int4_had (int4 after the rotation), "
    "int3_had, int2_had (3 and 2 bits after the rotation), int2_had64 (int2_had, one scale per 64 "
    "elements), int2_tcq64 (int2_had64's bytes, trellis-coded: less error, slower to write), q8_0, "
    "q4_0 (llama.cpp blocks), q8_0_had (q8_0 after the rotation); for keys only "
    "(--kv-cache-dtype-k): int4_chan, "
    "int3_chan, int2_chan (per channel over 16 tokens), int4_chan64, int3_chan64, int2_chan64 "
    "(over "
    "64 tokens: --block-size a multiple of 64), int2mix_chan64 (int2_chan64 with the widest "
    "quarter "
    "of the channels at 3 bits); see docs/kv-quantization.md";

// The list above is written by hand; it must name every format of the table (kv_format.h), as a
// word of its own ("int4" inside "int4_had" does not count).
bool names_every_format(const std::string& text) {
  const auto word_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (const KvDtype d : all_kv_dtypes()) {
    const std::string name = kv_dtype_name(d);
    bool found = false;
    for (size_t at = text.find(name); at != std::string::npos && !found;
         at = text.find(name, at + 1)) {
      const size_t end = at + name.size();
      found =
          (at == 0 || !word_char(text[at - 1])) && (end == text.size() || !word_char(text[end]));
    }
    if (!found) return false;
  }
  return true;
}

template <typename T>
void add_batched_tokens(CLI::App& cmd, T* tokens, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option("--max-num-batched-tokens", *tokens,
                     "token budget of one engine step (prefill chunk size)")
          ->capture_default_str();
      return;
    case FlagRole::kSimulatedEngine:
      cmd.add_option("--max-num-batched-tokens", *tokens,
                     "token budget of one engine step (prefill chunk size; default: gpu 8192, "
                     "cpu 512)");
      return;
    case FlagRole::kPlanner:
      cmd.add_option("--max-num-batched-tokens", *tokens,
                     "size windowed layers as the engine holds them during a step of this many "
                     "tokens (window - 1 + N, in the blocks they span); default: the window. Also "
                     "the prefill chunk of the engine footprint (default 512, the engine's)");
      return;
  }
  unknown_role("--max-num-batched-tokens");
}

}  // namespace

// MODEL, the positional spelling of -m/--model (`kvserve serve MODEL`, as `vllm serve MODEL`).
// CLI11 runs option callbacks in declaration order, so -m's value is in *model when this runs.
void add_model_positional(CLI::App& cmd, std::string* model) {
  cmd.add_option_function<std::string>(
      "MODEL",
      [model](const std::string& positional) {
        if (!model->empty() && *model != positional)
          fail("the model is given twice: MODEL '" + positional + "' and -m/--model '" + *model +
                   "'; give one",
               2);
        *model = positional;
      },
      "the model, as -m/--model gives it (`kvserve " + cmd.get_name() + " MODEL`, as vLLM)");
}

void add_model_flag(CLI::App& cmd, std::string* model, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option(
          "-m,--model", *model,
          "GGUF model file (default: the cached default model, see scripts/fetch-model)");
      add_model_positional(cmd, model);
      return;
    case FlagRole::kPlanner:
      cmd.add_option("-m,--model", *model,
                     "catalog name (--list-models), its Hugging Face id (meta-llama/Llama-3.1-8B; "
                     "nothing is downloaded), config.json, a directory with one, or a GGUF");
      add_model_positional(cmd, model);
      return;
    case FlagRole::kSimulatedEngine: break;
  }
  unknown_role("--model");
}

void add_kv_cache_dtype_flags(CLI::App& cmd, std::string* both, std::string* k, std::string* v,
                              FlagRole role) {
  switch (role) {
    case FlagRole::kEngine: {
      const std::string help = std::string("KV element format: auto (= f16), ") + kKvFormats;
      KVS_CHECK_MSG(names_every_format(help), "--kv-cache-dtype's help misses a KV format");
      cmd.add_option("--kv-cache-dtype", *both, help)->capture_default_str();
      cmd.add_option("--kv-cache-dtype-k", *k, "K format, same names (overrides --kv-cache-dtype)");
      cmd.add_option("--kv-cache-dtype-v", *v, "V format, same names (overrides --kv-cache-dtype)");
      return;
    }
    case FlagRole::kPlanner: {
      const std::string help =
          std::string("KV format for K and V: auto (the model's dtype), ") + kKvFormats;
      KVS_CHECK_MSG(names_every_format(help), "--kv-dtype's help misses a KV format");
      cmd.add_option("--kv-dtype,--kv-cache-dtype", *both, help)->capture_default_str();
      cmd.add_option("--k-dtype,--kv-cache-dtype-k", *k, "K format (overrides --kv-dtype)");
      cmd.add_option("--v-dtype,--kv-cache-dtype-v", *v, "V format (overrides --kv-dtype)");
      return;
    }
    case FlagRole::kSimulatedEngine: break;
  }
  unknown_role("--kv-cache-dtype");
}

void add_kv_layer_dtype_flags(CLI::App& cmd, std::string* k_layers, std::string* v_layers,
                              FlagRole role) {
  const char* what = nullptr;
  switch (role) {
    case FlagRole::kEngine: what = "stored"; break;
    case FlagRole::kSimulatedEngine: what = "simulated"; break;
    case FlagRole::kPlanner: what = "counted"; break;
  }
  if (what == nullptr) unknown_role(kKLayersFlag);
  const std::string tail = std::string(" ") + what +
                           " in their own format, LAYER=FORMAT or FIRST-LAST=FORMAT items "
                           "separated by commas (layers count from 0), e.g. ";
  cmd.add_option(kKLayersFlag, *k_layers,
                 "layers whose keys are" + tail +
                     "18=int4_chan,20=int4_chan with --kv-cache-dtype-k int2_chan: a few "
                     "layers at more bits take most of a low-bit format's loss; keys grouped "
                     "like the pool's (docs/kv-quantization.md)");
  cmd.add_option(kVLayersFlag, *v_layers, "layers whose values are" + tail + "1=int4_had");
}

void add_kv_cache_memory_flag(CLI::App& cmd, std::string* bytes, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option("--kv-cache-memory", *bytes,
                     "bytes for the paged KV pool, e.g. 512MiB, 2GiB, 1GB (GB = 10^9, GiB = 2^30)")
          ->capture_default_str();
      return;
    case FlagRole::kSimulatedEngine:
      cmd.add_option("--kv-cache-memory", *bytes,
                     "KV pool per GPU instead of the memory model (as kvserve serve; required "
                     "with --device cpu)");
      return;
    case FlagRole::kPlanner:
      cmd.add_option("--kv-cache-memory", *bytes,
                     "also show the pool the engine allocates for this budget (as kvserve "
                     "generate/serve --kv-cache-memory)");
      return;
  }
  unknown_role("--kv-cache-memory");
}

void add_block_size_flag(CLI::App& cmd, uint32_t* tokens, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
    case FlagRole::kSimulatedEngine:
      cmd.add_option("--block-size", *tokens, "tokens per KV block (1..256)")
          ->capture_default_str();
      return;
    case FlagRole::kPlanner:
      cmd.add_option("--block-size", *tokens, "paging block in tokens (0 = contiguous)")
          ->capture_default_str();
      return;
  }
  unknown_role("--block-size");
}

void add_max_num_batched_tokens_flag(CLI::App& cmd, uint32_t* tokens, FlagRole role) {
  KVS_CHECK_MSG(role != FlagRole::kPlanner, "the planner's --max-num-batched-tokens is 64-bit");
  add_batched_tokens(cmd, tokens, role);
}

void add_max_num_batched_tokens_flag(CLI::App& cmd, uint64_t* tokens, FlagRole role) {
  KVS_CHECK_MSG(role == FlagRole::kPlanner, "the engine's --max-num-batched-tokens is 32-bit");
  add_batched_tokens(cmd, tokens, role);
}

void add_max_num_seqs_flag(CLI::App& cmd, uint32_t* seqs, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option("--max-num-seqs", *seqs, "sequences running at once")->capture_default_str();
      return;
    case FlagRole::kSimulatedEngine:
      cmd.add_option("--max-num-seqs", *seqs,
                     "sequences running at once (default: gpu 256, cpu 64)");
      return;
    case FlagRole::kPlanner:
      cmd.add_option("--max-num-seqs", *seqs,
                     "the engine's sequences at once: with --kv-cache-memory and a per-channel K "
                     "format, sizes their f16 key tails")
          ->capture_default_str();
      return;
  }
  unknown_role("--max-num-seqs");
}

void add_kv_recent_window_flag(CLI::App& cmd, uint32_t* tokens, FlagRole role) {
  const char* help = nullptr;
  switch (role) {
    case FlagRole::kEngine:
      help =
          "keep each sequence's newest tokens (this many, a multiple of 16, plus up to 15) in f16 "
          "beside a quantized pool, as KIVI does; 0 = off (docs/kv-quantization.md)";
      break;
    case FlagRole::kSimulatedEngine:
      help =
          "the engine's recent-token window (tokens): its f16 rows for --max-num-seqs sequences "
          "come out of the pool, and prefix hits stop at each sequence's window floor";
      break;
    case FlagRole::kPlanner:
      help =
          "the engine's recent-token window (tokens): its f16 rows are counted in every "
          "request, and with --kv-cache-memory for --max-num-seqs sequences in the pool";
      break;
  }
  if (help == nullptr) unknown_role("--kv-recent-window");
  cmd.add_option("--kv-recent-window", *tokens, help)->capture_default_str();
}

void add_kv_recent_window_dtype_flag(CLI::App& cmd, std::string* dtype, FlagRole role) {
  const char* help = nullptr;
  switch (role) {
    case FlagRole::kEngine:
      help =
          "the recent-token window's rows: f16, or int8 (an f16 scale per row: about half the "
          "bytes, so a window twice as long for the same memory)";
      break;
    case FlagRole::kPlanner:
    case FlagRole::kSimulatedEngine:
      help = "the engine's --kv-recent-window-dtype (f16 or int8): the bytes of its window's rows";
      break;
  }
  if (help == nullptr) unknown_role("--kv-recent-window-dtype");
  cmd.add_option("--kv-recent-window-dtype", *dtype, help)->capture_default_str();
}

void add_kv_attention_sink_flag(CLI::App& cmd, bool* on, FlagRole role) {
  const char* help = nullptr;
  switch (role) {
    case FlagRole::kEngine:
      help =
          "with --kv-recent-window: every query also reads the first position's K and V in f16 "
          "(the attention sink), which a 2-bit cache rounds most harmfully "
          "(docs/kv-quantization.md)";
      break;
    case FlagRole::kPlanner:
      help =
          "the engine's attention sink: with --kv-recent-window, its f16 rows (two per "
          "sequence) are counted in every request and, with --kv-cache-memory, in the pool";
      break;
    case FlagRole::kSimulatedEngine:
      help =
          "the engine's attention sink: with --kv-recent-window, its f16 rows (two per "
          "--max-num-seqs sequence) come out of the pool, and a prefix hit whose first token "
          "the sink's table forgot is refused, as in the engine";
      break;
  }
  if (help == nullptr) unknown_role("--kv-attention-sink");
  cmd.add_flag("--kv-attention-sink", *on, help);
}

void add_on_off_flags(CLI::App& cmd, const std::string& name, bool* value, const std::string& help,
                      const std::string& off_help) {
  const std::string shown = *value ? "on" : "off";
  // Two flags rather than CLI11's "--x,!--no-x", whose help reads "--x,--no-x{false}" (the value
  // --no-x sets, easily read as the default). trigger_on_parse: the last one given wins.
  cmd.add_flag_callback(
         "--" + name, [value] { *value = true; }, help + " (default: " + shown + ")")
      ->trigger_on_parse();
  cmd.add_flag_callback(
         "--no-" + name, [value] { *value = false; }, off_help)
      ->trigger_on_parse();
}

void add_prefix_caching_flag(CLI::App& cmd, bool* enabled) {
  add_on_off_flags(cmd, "enable-prefix-caching", enabled,
                   "reuse cached KV blocks of identical prompt prefixes",
                   "turn prefix caching off");
}

void add_max_model_len_flag(CLI::App& cmd, uint32_t* tokens) {
  cmd.add_option("--max-model-len", *tokens,
                 "maximum tokens per sequence, prompt + output; longer requests are rejected "
                 "(default: the model's context)");
}

void add_preemption_flags(CLI::App& cmd, std::string* mode, std::string* swap_space,
                          FlagRole role) {
  KVS_CHECK_MSG(role != FlagRole::kPlanner, "--preemption-mode has no help for the planner");
  cmd.add_option("--swap-space", *swap_space,
                 role == FlagRole::kEngine
                     ? "host bytes for swapped-out KV blocks (--preemption-mode swap), e.g. 1GiB"
                     : "host bytes for each replica's swapped-out KV blocks (--preemption-mode "
                       "swap), e.g. 1GiB")
      ->capture_default_str();
  cmd.add_option("--preemption-mode", *mode,
                 "what a preempted request loses: recompute (its KV is recomputed) or swap (its "
                 "KV is copied to host memory and back)")
      ->capture_default_str();
}

void add_kv_offload_memory_flag(CLI::App& cmd, std::string* bytes, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option("--kv-offload-memory", *bytes,
                     "host RAM for the KV tier under the pool (L2): cached blocks the pool evicts "
                     "go there instead of being forgotten; 0 = off")
          ->capture_default_str();
      return;
    case FlagRole::kPlanner:
      cmd.add_option("--kv-offload-memory", *bytes,
                     "also report the prefix tokens a host KV tier of this size holds, per format");
      return;
    case FlagRole::kSimulatedEngine: break;
  }
  unknown_role("--kv-offload-memory");
}

void add_kv_offload_disk_bytes_flag(CLI::App& cmd, std::string* bytes, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option("--kv-offload-disk-bytes", *bytes,
                     "capacity of the disk tier (least recently used extents are deleted)")
          ->capture_default_str();
      return;
    case FlagRole::kPlanner:
      cmd.add_option("--kv-offload-disk-bytes", *bytes,
                     "also report the prefix tokens a disk KV tier of this size holds, per format");
      return;
    case FlagRole::kSimulatedEngine: break;
  }
  unknown_role("--kv-offload-disk-bytes");
}

void add_step_log_flag(CLI::App& cmd, std::string* path, FlagRole role) {
  switch (role) {
    case FlagRole::kEngine:
      cmd.add_option("--step-log", *path,
                     "write one JSON line per engine step to FILE (wall-clock times; compare with "
                     "simulate --step-log, docs/simulate.md)");
      return;
    case FlagRole::kSimulatedEngine:
      cmd.add_option("--step-log", *path,
                     "write one JSON line per simulated step to FILE (virtual time; the format of "
                     "serve --step-log)");
      return;
    case FlagRole::kPlanner: break;
  }
  unknown_role("--step-log");
}

void add_config_flag(CLI::App& cmd) {
  auto path = std::make_shared<std::string>();
  CLI::Option* opt =
      cmd.add_option("--config", *path,
                     "YAML file of flag values: keys are the long flag names (max-model-len: "
                     "4096, enable-prefix-caching: false, lists for repeatable flags); flags given "
                     "here win over it; an unknown key is an error (docs/serving.md)")
          ->configurable(false)
          ->type_name("FILE");
  // Runs once the command line is parsed and its options' callbacks have run, before the
  // subcommand's own callback: the file fills what the command line left out.
  cmd.parse_complete_callback([&cmd, opt, path] {
    if (opt->count() == 0) return;
    const Status applied = apply_config_file(cmd, *path);
    if (!applied.is_ok()) fail(applied.message(), 2);
  });
}

}  // namespace kvs::cli
