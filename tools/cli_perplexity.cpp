// kvserve perplexity: the quality yardstick (for quantized KV formats, block sizes, ...).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/perplexity.h"
#include "server/response_json.h"
#include "tools/cli_commands.h"
#include "tools/cli_common.h"

namespace kvs::cli {
namespace {

struct PerplexityFlags {
  EngineFlags engine;
  std::string file;
  uint32_t ctx = 512;
  uint32_t max_windows = 0;
  bool json = false;
};

void run_perplexity(PerplexityFlags& f) {
  std::ifstream in(f.file, std::ios::binary);
  if (!in) fail("-f: cannot open '" + f.file + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) fail("-f: '" + f.file + "' is empty");
  auto model = load_model_or_fail(f.engine);
  // The whole text is one token stream (no special-token parsing); BOS first when the model
  // asks for it, and then at the start of every window (perplexity.h).
  std::vector<int32_t> tokens =
      model->tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (f.max_windows > 0 && tokens.size() > uint64_t{f.max_windows} * f.ctx)
    tokens.resize(uint64_t{f.max_windows} * f.ctx);
  EngineConfig config = engine_config_or_fail(f.engine, *model);
  // Windows share no prefix, so the pool's cache only matters with the KV offload tiers: then
  // a window whose first half (the positions it does not score) a tier holds loads it instead
  // of computing it (a second run over the same --kv-offload-dir measures what demotion,
  // --kv-offload-dtype, does to quality: docs/offload.md).
  config.enable_prefix_caching = config.offload.enabled();
  auto engine = create_engine_or_fail(*model, config);
  const bool tty = isatty(fileno(stderr));
  auto result = compute_perplexity(
      *engine, tokens, f.ctx,
      model->tokenizer->adds_bos() ? model->tokenizer->bos_id() : std::nullopt,
      [&](uint32_t done, uint32_t total, double ppl) {
        if (tty)
          std::fprintf(stderr, "\rperplexity: window %u/%u, running ppl %.4f", done, total, ppl);
      });
  if (tty) std::fprintf(stderr, "\n");
  if (!result.is_ok()) fail(result.status().message());
  const PerplexityResult& r = *result;
  if (f.json) {
    nlohmann::json j = {{"model", model->path},
                        {"file", f.file},
                        {"text_tokens", tokens.size()},
                        {"ctx", f.ctx},
                        {"windows", r.windows},
                        {"scored_tokens", r.scored_tokens},
                        {"perplexity", r.perplexity},
                        {"mean_nll", r.mean_nll},
                        {"kv_cache_dtype_k", kv_dtype_name(config.k_dtype)},
                        {"kv_cache_dtype_v", kv_dtype_name(config.v_dtype)},
                        {"kv_bytes_per_token", engine->kv_pool().bytes_per_token},
                        {"block_size", config.block_size},
                        {"seconds", r.seconds},
                        {"tokens_per_s", r.windows * double(f.ctx) / r.seconds},
                        {"kv_offload", offload_json(engine->snapshot().offload)}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "perplexity %.4f over %llu scored tokens (%u windows of %u tokens, KV %s/%s), %.1f s\n",
        r.perplexity, static_cast<unsigned long long>(r.scored_tokens), r.windows, f.ctx,
        kv_dtype_name(config.k_dtype), kv_dtype_name(config.v_dtype), r.seconds);
  }
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto flags = std::make_shared<PerplexityFlags>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of the model over a text file");
  add_engine_flags(cmd, &flags->engine);
  cmd->add_option("-f,--file", flags->file, "the text file")->required();
  cmd->add_option("--ctx", flags->ctx, "window length in tokens; the second half of each is scored")
      ->capture_default_str();
  cmd->add_option("--max-windows", flags->max_windows, "score at most N windows (0 = all)");
  cmd->add_flag("--json", flags->json, "print one JSON object");
  cmd->callback([flags] { run_perplexity(*flags); });
}

}  // namespace kvs::cli
