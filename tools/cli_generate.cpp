// kvserve generate: streams a reply to a prompt (or N prompts at once) and reports speed and
// KV cache use.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "model/utf8_stream_decoder.h"
#include "server/response_json.h"
#include "tools/cli_commands.h"
#include "tools/cli_common.h"
#include "tools/cli_common_flags.h"

namespace kvs::cli {
namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::string prompt;
  bool prompt_given = false;  // -p was on the command line, even as "" (e.g. "$(cat missing)")
  std::string prompts_file;
  std::string system;
  uint32_t max_tokens = 128;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  bool chat = false;
  uint32_t parallel = 1;
  uint32_t repeat = 1;
  bool ignore_eos = false;
  bool json = false;
};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--prompts: cannot open '" + path + "'");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  if (out.empty()) fail("--prompts: '" + path + "' has no non-empty line");
  return out;
}

void run_generate(GenerateFlags& f) {
  if (f.prompt.empty() && f.prompts_file.empty())
    fail(f.prompt_given
             ? "-p/--prompt is empty (if it came from $(cat FILE), the file is missing or "
               "empty; --prompts FILE reads one prompt per line)"
             : "give a prompt with -p or --prompts FILE");
  if (f.parallel == 0) fail("--parallel must be at least 1");
  if (f.repeat == 0) fail("--repeat must be at least 1");
  std::vector<std::string> prompts =
      f.prompts_file.empty() ? std::vector<std::string>{f.prompt} : read_prompts(f.prompts_file);
  if (prompts.size() == 1 && f.parallel > 1) prompts.assign(f.parallel, prompts[0]);

  auto model = load_model_or_fail(f.engine);
  const Tokenizer& tok = *model->tokenizer;
  std::vector<std::vector<int32_t>> encoded;
  for (const std::string& p : prompts) {
    std::string text = p;
    if (f.chat) {
      if (!model->chat_template) fail("--chat: the model has no usable chat template");
      std::vector<ChatMessage> msgs;
      if (!f.system.empty()) msgs.push_back({"system", f.system});
      msgs.push_back({"user", p});
      text = model->chat_template->render(msgs, /*add_generation_prompt=*/true);
    }
    encoded.push_back(tok.encode(text, /*add_special=*/true, /*parse_special=*/true));
    if (encoded.back().empty()) fail("the prompt encodes to no tokens");
  }
  const EngineConfig config = engine_config_or_fail(f.engine, *model);
  auto engine = create_engine_or_fail(*model, config);
  const bool stream = !f.json && encoded.size() == 1;

  nlohmann::json runs = nlohmann::json::array();
  std::vector<std::string> texts;
  for (uint32_t r = 0; r < f.repeat; ++r) {
    std::vector<SeqId> ids;
    for (size_t i = 0; i < encoded.size(); ++i) {
      SequenceRequest req{
          .prompt = encoded[i],
          .sampling = {.temperature = f.temperature,
                       .top_k = f.top_k,
                       .top_p = f.top_p,
                       .seed = f.seed ? std::optional<uint64_t>(*f.seed + i) : std::nullopt},
          .max_tokens = f.max_tokens,
          .cache_salt = "",
          .ignore_eos = f.ignore_eos};
      auto id = engine->add_request(std::move(req));
      if (!id.is_ok()) fail(id.status().message());
      ids.push_back(*id);
    }
    Utf8StreamDecoder decoder(tok);
    const auto t0 = Clock::now();
    while (engine->has_unfinished()) {
      for (const StepOutput& o : engine->step()) {
        if (!stream) continue;
        if (o.finished && engine->sequence(o.seq).finish == FinishReason::kEos) continue;
        const std::string piece = decoder.push(o.token);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
    const double wall = seconds_between(t0, Clock::now());
    if (stream) {
      const std::string rest = decoder.flush();
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      std::fputc('\n', stdout);
    }
    nlohmann::json run;
    uint64_t prompt_tokens = 0, cached = 0, generated = 0;
    double ttft_max = 0;
    nlohmann::json seqs = nlohmann::json::array();
    for (SeqId id : ids) {
      const Sequence& s = engine->sequence(id);
      std::vector<int32_t> out(s.tokens.begin() + s.prompt_len, s.tokens.end());
      if (!out.empty() && s.finish == FinishReason::kEos) out.pop_back();
      std::string text = tok.decode(out, /*skip_special=*/false);
      const double ttft = seconds_between(s.arrival, s.first_token);
      ttft_max = std::max(ttft_max, ttft);
      prompt_tokens += s.prompt_len;
      cached += s.cached_tokens;
      generated += s.num_generated();
      seqs.push_back({{"prompt_tokens", s.prompt_len},
                      {"cached_tokens", s.cached_tokens},
                      {"generated_tokens", s.num_generated()},
                      {"finish_reason", finish_reason_name(s.finish)},
                      {"ttft_ms", ttft * 1e3},
                      {"text", text}});
      texts.push_back(std::move(text));
      engine->release(id);
    }
    run = {{"run", r + 1},
           {"prompt_tokens", prompt_tokens},
           {"cached_tokens", cached},
           {"generated_tokens", generated},
           {"prefill_ms", ttft_max * 1e3},
           {"wall_ms", wall * 1e3},
           {"sequences", seqs}};
    runs.push_back(run);
  }

  const EngineCounters& c = engine->counters();
  const KvPoolPlan& pool = engine->kv_pool();
  const double prefill_tps =
      c.prefill_step_seconds > 0 ? c.prompt_tokens_computed / c.prefill_step_seconds : 0;
  const double decode_tps =
      c.decode_step_seconds > 0 ? c.decode_step_tokens / c.decode_step_seconds : 0;
  const uint64_t kv_in_use = uint64_t{c.peak_blocks_in_use} * pool.block_bytes;
  const KvCacheCounters cache = engine->snapshot().cache;
  const double hit_rate = cache.prefix_query_tokens == 0
                              ? 0
                              : double(cache.prefix_hit_tokens) / cache.prefix_query_tokens;
  if (f.json) {
    nlohmann::json j = {
        {"model", model->path},
        {"prompt_tokens", runs[0]["prompt_tokens"]},
        {"generated_tokens", c.generated_tokens},
        {"prefill_tokens_computed", c.prompt_tokens_computed},
        {"prefill_tokens_per_s", prefill_tps},
        {"decode_tokens_per_s", decode_tps},
        {"kv_bytes_per_token", pool.bytes_per_token},
        {"kv_bytes_per_token_formula", pool.formula},
        {"kv_bytes_in_use", kv_in_use},
        {"kv_pool_bytes", pool.pool_bytes},
        {"kv_key_tail_bytes", pool.key_tail_bytes},
        {"kv_recent_window", pool.recent_window},
        {"kv_recent_window_bytes", pool.recent_window_bytes},
        {"kv_recent_window_dtype", kv_dtype_name(pool.recent_window_dtype)},
        {"kv_attention_sink", pool.attention_sink},
        {"kv_pool_blocks", pool.num_blocks},
        {"kv_pool_tokens", pool.num_tokens},
        {"weights_bytes", model->model->weight_bytes()},
        {"weights_resident_bytes", model->model->resident_weight_bytes()},
        {"weights_pack_seconds", model->model->weight_pack_seconds()},
        {"block_size", pool.block_size},
        {"kv_cache_dtype_k", kv_dtype_name(config.k_dtype)},
        {"kv_cache_dtype_v", kv_dtype_name(config.v_dtype)},
        {"kv_cache_dtype_k_layers", kv_layer_formats_text(config.layer_formats, 'k')},
        {"kv_cache_dtype_v_layers", kv_layer_formats_text(config.layer_formats, 'v')},
        {"prefix_cache_hit_rate", hit_rate},
        {"preemptions", engine->num_preemptions()},
        {"kv_offload", offload_json(engine->snapshot().offload)},
        {"threads", engine->num_threads()},
        {"steps", engine->snapshot().steps},
        {"parallel_regions", engine->parallel_regions()},
        {"runs", runs}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (!stream) {
    for (size_t i = 0; i < texts.size(); ++i) std::printf("[%zu] %s\n", i, texts[i].c_str());
  }
  std::fprintf(stderr,
               "\n--- kvserve generate ---\n"
               "prompt tokens     %llu (cached %llu)\n"
               "generated tokens  %llu\n"
               "prefill           %.1f tokens/s\n"
               "decode            %.1f tokens/s\n"
               "KV bytes/token    %s\n"
               "KV bytes in use   %s (peak, %u blocks of %u tokens)\n"
               "KV pool           %s in %u blocks\n",
               static_cast<unsigned long long>(runs[0]["prompt_tokens"].get<uint64_t>()),
               static_cast<unsigned long long>(runs.back()["cached_tokens"].get<uint64_t>()),
               static_cast<unsigned long long>(c.generated_tokens), prefill_tps, decode_tps,
               pool.formula.c_str(), format_bytes_binary(kv_in_use).c_str(), c.peak_blocks_in_use,
               pool.block_size, format_bytes_binary(pool.pool_bytes).c_str(), pool.num_blocks);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt, streaming it");
  add_engine_flags(cmd, &flags->engine);
  CLI::Option* prompt = cmd->add_option("-p,--prompt", flags->prompt, "the prompt text");
  cmd->add_option("--prompts", flags->prompts_file,
                  "a file with one prompt per line, run in parallel");
  cmd->add_option("-n,--max-tokens", flags->max_tokens, "tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--temp,--temperature", flags->temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", flags->top_k, "sample from the k most likely tokens (0 = all)")
      ->capture_default_str();
  cmd->add_option("--top-p", flags->top_p, "nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", flags->seed, "random seed (sequence i of --parallel uses seed + i)");
  cmd->add_flag("--chat", flags->chat, "format the prompt with the model's chat template");
  cmd->add_option("--system", flags->system, "system message for --chat");
  cmd->add_option("--parallel", flags->parallel,
                  "run N sequences of the prompt at once (one batch)")
      ->capture_default_str();
  cmd->add_option("--repeat", flags->repeat,
                  "run the prompt(s) N times in one process (shows prefix-cache reuse)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "keep generating past end-of-turn tokens");
  cmd->add_flag("--json", flags->json, "print one JSON object with the text and statistics");
  add_config_flag(*cmd);
  cmd->callback([flags, prompt] {
    flags->prompt_given = prompt->count() > 0;
    run_generate(*flags);
  });
}

}  // namespace kvs::cli
