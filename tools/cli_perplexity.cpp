// kvserve perplexity: the quality yardstick (for quantized KV formats, block sizes, ...).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/kl_divergence.h"
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
  // --rank-layers k|v: one run per layer with that layer's K (V) in --rank-format, ranked.
  std::string rank_layers;
  std::string rank_format = "int4_chan";
  uint32_t rank_top = 3;
  // --kl-divergence-reference: a second engine with this KV format scores the same windows.
  std::string kl_reference;
};

// The perplexity of `tokens` through `engine` (progress on a terminal); fails with one clear line.
PerplexityResult perplexity_of(Engine& engine, const LoadedModel& model,
                               const std::vector<int32_t>& tokens, uint32_t ctx,
                               const std::string& progress_label) {
  const bool tty = isatty(fileno(stderr));
  auto result = compute_perplexity(
      engine, tokens, ctx, model.tokenizer->adds_bos() ? model.tokenizer->bos_id() : std::nullopt,
      [&](uint32_t done, uint32_t total, double ppl) {
        if (tty)
          std::fprintf(stderr, "\rperplexity%s: window %u/%u, running ppl %.4f",
                       progress_label.c_str(), done, total, ppl);
      });
  if (tty) std::fprintf(stderr, "\n");
  if (!result.is_ok()) fail(result.status().message());
  return *result;
}

// --rank-layers: which layers' K (or V) gain most from another format, one layer at a time on
// this text (a calibration text, not the one the result is judged on). The ranking is of single
// changes: layer parts interact, so judge the chosen set with a plain run
// (docs/kv-quantization.md, "Per-layer formats").
void rank_layers(const PerplexityFlags& f, LoadedModel& model, const EngineConfig& config,
                 const std::vector<int32_t>& tokens) {
  const char role = f.rank_layers == "k" ? 'k' : f.rank_layers == "v" ? 'v' : 0;
  if (role == 0) fail("--rank-layers must be k or v, got '" + f.rank_layers + "'");
  auto format = parse_kv_dtype(f.rank_format);
  if (!format.is_ok()) fail("--rank-format: " + format.status().message());
  const std::string flag = role == 'k' ? kKLayersFlag : kVLayersFlag;
  {  // a format the role cannot take fails before the first run
    KvLayerFormats trial = config.layer_formats;
    (role == 'k' ? trial.k : trial.v)[0] = *format;
    const Status ok = check_kv_layer_formats(trial, model.spec.n_layers, config.k_dtype);
    if (!ok.is_ok()) fail(ok.message());
  }
  const PerplexityResult base =
      perplexity_of(*create_engine_or_fail(model, config), model, tokens, f.ctx, " (base)");
  struct Ranked {
    uint32_t layer;
    double perplexity;
  };
  std::vector<Ranked> ranked;
  const uint32_t layers = model.spec.n_layers;
  for (uint32_t l = 0; l < layers; ++l) {
    EngineConfig c = config;
    auto& listed = role == 'k' ? c.layer_formats.k : c.layer_formats.v;
    if (listed.contains(l)) continue;  // already in its own format
    listed[l] = *format;
    const PerplexityResult r =
        perplexity_of(*create_engine_or_fail(model, c), model, tokens, f.ctx,
                      " (layer " + std::to_string(l) + "/" + std::to_string(layers) + ")");
    ranked.push_back({l, r.perplexity});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& a, const Ranked& b) { return a.perplexity < b.perplexity; });
  // The suggestion: the listed layers and the top ones that lower perplexity.
  KvLayerFormats suggested = config.layer_formats;
  for (size_t i = 0; i < ranked.size() && i < f.rank_top; ++i)
    if (ranked[i].perplexity < base.perplexity)
      (role == 'k' ? suggested.k : suggested.v)[ranked[i].layer] = *format;
  const std::string suggestion = flag + " " + kv_layer_formats_text(suggested, role);
  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Ranked& r : ranked)
      rows.push_back({{"layer", r.layer},
                      {"perplexity", r.perplexity},
                      {"change", r.perplexity - base.perplexity}});
    const nlohmann::json j = {{"model", model.path},
                              {"file", f.file},
                              {"ctx", f.ctx},
                              {"windows", base.windows},
                              {"role", std::string(1, role)},
                              {"format", kv_dtype_name(*format)},
                              {"kv_cache_dtype_k", kv_dtype_name(config.k_dtype)},
                              {"kv_cache_dtype_v", kv_dtype_name(config.v_dtype)},
                              {"base_perplexity", base.perplexity},
                              {"layers", rows},
                              {"suggested", suggestion}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("base: perplexity %.4f (%u windows of %u tokens, KV %s/%s%s)\n", base.perplexity,
              base.windows, f.ctx, kv_dtype_name(config.k_dtype), kv_dtype_name(config.v_dtype),
              kv_layer_formats_suffix(config.layer_formats).c_str());
  std::printf("%s of one layer in %s, best first:\n", role == 'k' ? "keys" : "values",
              kv_dtype_name(*format));
  std::printf("  layer  perplexity    change\n");
  for (const Ranked& r : ranked)
    std::printf("  %5u  %10.4f  %+8.4f\n", r.layer, r.perplexity, r.perplexity - base.perplexity);
  std::printf("suggested (the top %u that lower it): %s\n", f.rank_top, suggestion.c_str());
}

// The JSON fields every perplexity run reports: the text, the windows, the result, the pool.
nlohmann::json run_json(const PerplexityFlags& f, const LoadedModel& model,
                        const EngineConfig& config, const Engine& engine, size_t text_tokens,
                        const PerplexityResult& r) {
  return {{"model", model.path},
          {"file", f.file},
          {"text_tokens", text_tokens},
          {"ctx", f.ctx},
          {"windows", r.windows},
          {"scored_tokens", r.scored_tokens},
          {"perplexity", r.perplexity},
          {"mean_nll", r.mean_nll},
          {"kv_cache_dtype_k", kv_dtype_name(config.k_dtype)},
          {"kv_cache_dtype_v", kv_dtype_name(config.v_dtype)},
          {"kv_cache_dtype_k_layers", kv_layer_formats_text(config.layer_formats, 'k')},
          {"kv_cache_dtype_v_layers", kv_layer_formats_text(config.layer_formats, 'v')},
          {"kv_bytes_per_token", engine.kv_pool().bytes_per_token},
          {"block_size", config.block_size},
          {"seconds", r.seconds}};
}

// --kl-divergence-reference F: the KL divergence of this engine's next-token distributions from
// those of an engine with F keys and values (no layer parts, window or sink), on the same windows.
void kl_divergence(const PerplexityFlags& f, LoadedModel& model, const EngineConfig& config,
                   const std::vector<int32_t>& tokens) {
  auto dtype = parse_kv_dtype(f.kl_reference);
  if (!dtype.is_ok()) fail("--kl-divergence-reference: " + dtype.status().message());
  EngineConfig rc = config;
  rc.k_dtype = rc.v_dtype = *dtype;
  rc.layer_formats = {};
  rc.recent_window = 0;
  rc.attention_sink = false;
  rc.recent_window_dtype = KvDtype::kF16;
  auto reference = create_engine_or_fail(model, rc);
  auto engine = create_engine_or_fail(model, config);
  const bool tty = isatty(fileno(stderr));
  auto result = compute_kl_divergence(
      *reference, *engine, tokens, f.ctx,
      model.tokenizer->adds_bos() ? model.tokenizer->bos_id() : std::nullopt,
      [&](uint32_t done, uint32_t total, double kl) {
        if (tty)
          std::fprintf(stderr, "\rKL divergence: window %u/%u, running mean %.6f", done, total, kl);
      });
  if (tty) std::fprintf(stderr, "\n");
  if (!result.is_ok()) fail(result.status().message());
  const KlDivergenceResult& r = *result;
  if (f.json) {
    nlohmann::json j = run_json(f, model, config, *engine, tokens.size(), r.test);
    j["kl_divergence"] = {{"reference_kv_cache_dtype", kv_dtype_name(*dtype)},
                          {"reference_perplexity", r.reference.perplexity},
                          {"mean", r.mean},
                          {"mean_stderr", r.mean_stderr},
                          {"median", r.median},
                          {"p99", r.p99},
                          {"max", r.max},
                          {"same_top", r.same_top}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "perplexity %.4f (reference %s: %.4f) over %llu scored tokens (%u windows of %u tokens, KV "
      "%s/%s%s)\n",
      r.test.perplexity, kv_dtype_name(*dtype), r.reference.perplexity,
      static_cast<unsigned long long>(r.scored_tokens), r.test.windows, f.ctx,
      kv_dtype_name(config.k_dtype), kv_dtype_name(config.v_dtype),
      kv_layer_formats_suffix(config.layer_formats).c_str());
  std::printf(
      "KL divergence from %s KV: mean %.6f +/- %.6f, median %.6f, 99th percentile %.6f, max %.6f\n",
      kv_dtype_name(*dtype), r.mean, r.mean_stderr, r.median, r.p99, r.max);
  std::printf("same most likely token: %.3f%% of positions; %.1f s\n", 100.0 * r.same_top,
              r.seconds);
}

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
  if (!f.rank_layers.empty()) {
    if (config.offload.enabled())
      fail("--rank-layers runs the model once per layer: drop the --kv-offload-* tiers");
    if (!f.kl_reference.empty())
      fail("--rank-layers and --kl-divergence-reference are separate runs");
    rank_layers(f, *model, config, tokens);
    return;
  }
  if (!f.kl_reference.empty()) {
    if (config.offload.enabled())
      fail(
          "--kl-divergence-reference compares two engines' formats: drop the --kv-offload-* tiers");
    kl_divergence(f, *model, config, tokens);
    return;
  }
  auto engine = create_engine_or_fail(*model, config);
  const PerplexityResult r = perplexity_of(*engine, *model, tokens, f.ctx, "");
  if (f.json) {
    nlohmann::json j = run_json(f, *model, config, *engine, tokens.size(), r);
    j["tokens_per_s"] = r.windows * double(f.ctx) / r.seconds;
    j["kv_offload"] = offload_json(engine->snapshot().offload);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "perplexity %.4f over %llu scored tokens (%u windows of %u tokens, KV %s/%s%s), %.1f s\n",
        r.perplexity, static_cast<unsigned long long>(r.scored_tokens), r.windows, f.ctx,
        kv_dtype_name(config.k_dtype), kv_dtype_name(config.v_dtype),
        kv_layer_formats_suffix(config.layer_formats).c_str(), r.seconds);
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
  cmd->add_option("--rank-layers", flags->rank_layers,
                  "k or v: run once per layer with that layer's keys (values) in --rank-format "
                  "and rank the layers by perplexity, to choose --kv-cache-dtype-k|v-layers on a "
                  "calibration text (docs/kv-quantization.md)");
  cmd->add_option("--rank-format", flags->rank_format, "the format --rank-layers tries per layer")
      ->capture_default_str();
  cmd->add_option("--rank-top", flags->rank_top,
                  "layers --rank-layers suggests (those of the top N that lower perplexity)")
      ->capture_default_str();
  cmd->add_option("--kl-divergence-reference", flags->kl_reference,
                  "a KV format (f32, f16, ...): a second engine with it scores the same windows, "
                  "and the KL divergence of this engine's next-token distributions from its is "
                  "reported (mean, median, 99th percentile, same most likely token)");
  cmd->callback([flags] { run_perplexity(*flags); });
}

}  // namespace kvs::cli
