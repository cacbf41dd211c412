// Decode end to end at a long context, KV formats interleaved: one engine per format (each with its
// own copy of the model), every engine prefilled with the same prompt, then rounds in which each
// engine in turn runs a slice of decode steps (Engine::step: the forward pass, the KV writes and
// reseals, attention and sampling, as `kvserve generate` runs them). Slices of a few hundred
// milliseconds alternate between the formats, so a shared machine's slow minutes fall on every
// format alike; each round's ratio to the first format is taken within the round.
//
//   build/bench/decode_bench -m MODEL.gguf [--prompt-file TEXT] [--context 16384] [--rounds 24]
//                            [--steps 8] [--threads N] [--json]
//                            --case 'NAME: FLAGS' --case 'NAME: FLAGS' ...
//
// FLAGS are kvserve's engine flags for the cache: --block-size, --kv-cache-dtype[-k|-v],
// --kv-cache-dtype-k-layers, --kv-cache-dtype-v-layers, --kv-recent-window,
// --kv-recent-window-dtype, --kv-attention-sink (what bench/kv_goals.py's recipes pass to
// `kvserve generate`). The prompt is the first --context tokens of --prompt-file (default: the KJV
// text in tests/data); the first case is the baseline of the ratios (one case alone: a profile).
// The order of the cases turns by one every round, so no format always runs first after another's
// slice.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/loaded_model.h"
#include "quant/kv_format.h"
#include "quant/kv_layer_formats.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "decode_bench: %s\n", what.c_str());
  std::exit(2);
}

template <typename T>
T value_or_fail(Result<T> r, const std::string& what) {
  if (!r.is_ok()) fail(what + ": " + r.status().message());
  return std::move(r).value();
}

struct Case {
  std::string name;
  std::string flags;  // as given, for the report
  EngineConfig config;
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Engine> engine;
  SeqId seq{0};
  std::vector<double> ms_per_step;  // one per timed round
};

// A whole decimal number in [min, 2^20] (a flag's value), or exit naming `what`.
uint32_t count_or_fail(const std::string& s, long min, const std::string& what) {
  char* end = nullptr;
  const long n = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || n < min || n > 1 << 20)
    fail(what + ": '" + s + "' is not a count");
  return static_cast<uint32_t>(n);
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// "NAME: FLAGS" -> the case's name and engine config (the cache flags of `kvserve generate`).
Case parse_case(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0)
    fail("--case takes 'NAME: FLAGS', got '" + spec + "'");
  Case c;
  c.name = spec.substr(0, colon);
  if (c.name.find_first_of("\"\\") != std::string::npos)
    fail("a case's name has no quotes or backslashes");
  c.flags = spec.substr(colon + 1);
  while (!c.flags.empty() && c.flags.front() == ' ') c.flags.erase(0, 1);
  const std::vector<std::string> w = words(c.flags);
  std::string both = "f16", k, v, k_layers, v_layers, window_dtype = "f16";
  for (size_t i = 0; i < w.size(); ++i) {
    auto next = [&]() -> const std::string& {
      if (i + 1 >= w.size()) fail(c.name + ": " + w[i] + " needs a value");
      return w[++i];
    };
    auto number = [&] {  // the flag's value, named by the flag in an error
      const std::string flag = w[i];
      return count_or_fail(next(), 0, c.name + ": " + flag);
    };
    if (w[i] == "--block-size") {
      c.config.block_size = number();
    } else if (w[i] == "--kv-cache-dtype") {
      both = next();
    } else if (w[i] == "--kv-cache-dtype-k") {
      k = next();
    } else if (w[i] == "--kv-cache-dtype-v") {
      v = next();
    } else if (w[i] == "--kv-cache-dtype-k-layers") {
      k_layers = next();
    } else if (w[i] == "--kv-cache-dtype-v-layers") {
      v_layers = next();
    } else if (w[i] == "--kv-recent-window") {
      c.config.recent_window = number();
    } else if (w[i] == "--kv-recent-window-dtype") {
      window_dtype = next();
    } else if (w[i] == "--kv-attention-sink") {
      c.config.attention_sink = true;
    } else {
      fail(c.name + ": unknown flag '" + w[i] + "' (the cache's flags of kvserve generate)");
    }
  }
  const KvDtype d = value_or_fail(parse_kv_dtype(both), c.name + ": --kv-cache-dtype");
  c.config.k_dtype = k.empty() ? d : value_or_fail(parse_kv_dtype(k), c.name + ": -k");
  c.config.v_dtype = v.empty() ? d : value_or_fail(parse_kv_dtype(v), c.name + ": -v");
  c.config.layer_formats = value_or_fail(parse_kv_layer_flags(k_layers, v_layers), c.name);
  c.config.recent_window_dtype =
      value_or_fail(parse_recent_window_dtype(window_dtype), c.name + ": window dtype");
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Runs `steps` decode steps of the case's one sequence; returns ms per step.
double decode_slice(Case& c, uint32_t steps) {
  const auto t0 = Clock::now();
  for (uint32_t s = 0; s < steps; ++s) {
    if (c.engine->step().empty()) fail(c.name + ": a decode step produced no token");
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
}

int main_impl(int argc, char** argv) {
  std::string model_path,
      prompt_file = std::string(KVS_SOURCE_DIR) + "/tests/data/kjv_genesis_exodus.txt";
  uint32_t context = 16384, rounds = 24, steps = 8;
  int threads = 0;
  bool json = false;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail(a + " needs a value");
      return argv[++i];
    };
    auto count = [&](const std::string& s) { return count_or_fail(s, 1, a); };
    if (a == "-m" || a == "--model")
      model_path = next();
    else if (a == "--prompt-file")
      prompt_file = next();
    else if (a == "--context")
      context = count(next());
    else if (a == "--rounds")
      rounds = count(next());
    else if (a == "--steps")
      steps = count(next());
    else if (a == "--threads" || a == "-t")
      threads = static_cast<int>(count(next()));
    else if (a == "--json")
      json = true;
    else if (a == "--case")
      specs.push_back(next());
    else
      fail("unknown flag '" + a + "' (see the comment at the top of bench/decode_bench.cpp)");
  }
  if (model_path.empty()) fail("-m MODEL.gguf is required");
  if (specs.empty()) fail("give one --case or more: the first is the ratios' baseline");

  std::vector<Case> cases;
  for (const std::string& s : specs) cases.push_back(parse_case(s));
  std::ifstream in(prompt_file);
  if (!in) fail("cannot read " + prompt_file);
  std::stringstream text;
  text << in.rdbuf();

  // Each case decodes one warm-up slice and `rounds` timed ones.
  const uint32_t decode_tokens = (rounds + 1) * steps;
  std::vector<int32_t> prompt;
  for (Case& c : cases) {
    c.model = std::make_unique<LoadedModel>(value_or_fail(load_model(model_path), model_path));
    if (prompt.empty()) {
      prompt =
          c.model->tokenizer->encode(text.str(), /*add_special=*/true, /*parse_special=*/false);
      if (prompt.size() < context) {
        fail(prompt_file + " holds " + std::to_string(prompt.size()) +
             " tokens, fewer than --context");
      }
      prompt.resize(context);
    }
    c.config.kv_cache_memory = uint64_t{2} << 30;  // 2 GiB, as kv_goals' generate runs had
    c.config.threads = threads;
    c.config.max_num_seqs = 1;
    c.config.max_model_len = context + decode_tokens + 1;
    c.config.model_fingerprint = c.model->fingerprint;
    c.engine = value_or_fail(Engine::create(*c.model->model, c.config), c.name);
    SequenceRequest req;
    req.prompt = prompt;
    req.max_tokens = decode_tokens + 1;
    req.ignore_eos = true;
    c.seq = value_or_fail(c.engine->add_request(std::move(req)), c.name);
    // Prefill: steps until the prompt's first token is sampled (a sequence the engine finished
    // without one, e.g. a pool too small for the prompt, is an error, not a wait forever).
    const auto t0 = Clock::now();
    bool sampled = false;
    while (!sampled && c.engine->has_unfinished()) sampled = !c.engine->step().empty();
    if (!sampled)
      fail(c.name + ": the prompt was not prefilled (the pool or --context too large?)");
    std::fprintf(stderr, "%s: prefilled %u tokens in %.1f s\n", c.name.c_str(), context,
                 std::chrono::duration<double>(Clock::now() - t0).count());
  }
  for (Case& c : cases) decode_slice(c, steps);  // warm-up
  for (uint32_t r = 0; r < rounds; ++r) {
    for (size_t j = 0; j < cases.size(); ++j) {
      Case& c = cases[(j + r) % cases.size()];
      c.ms_per_step.push_back(decode_slice(c, steps));
    }
  }

  const Case& base = cases[0];
  if (json)
    std::printf("{\"context\": %u, \"rounds\": %u, \"steps\": %u, \"cases\": [", context, rounds,
                steps);
  else {
    std::printf(
        "Decode at %u tokens of context, %u rounds of %u steps per format (interleaved):\n\n",
        context, rounds, steps);
    std::printf(
        "| format | flags | ms/step, median | best | tok/s, median | x %s (median of the rounds' "
        "ratios) |\n",
        base.name.c_str());
    std::printf("|---|---|---|---|---|---|\n");
  }
  for (size_t j = 0; j < cases.size(); ++j) {
    const Case& c = cases[j];
    std::vector<double> ratios;
    for (uint32_t r = 0; r < rounds; ++r) ratios.push_back(base.ms_per_step[r] / c.ms_per_step[r]);
    const double med = median(c.ms_per_step);
    const double best = *std::min_element(c.ms_per_step.begin(), c.ms_per_step.end());
    if (json) {
      std::printf("%s{\"name\": \"%s\", \"flags\": \"%s\", \"ms_per_step\": [", j ? ", " : "",
                  c.name.c_str(), c.flags.c_str());
      for (uint32_t r = 0; r < rounds; ++r) std::printf("%s%.3f", r ? ", " : "", c.ms_per_step[r]);
      std::printf("], \"median_ms\": %.3f, \"best_ms\": %.3f, \"ratio_median\": %.4f}", med, best,
                  median(ratios));
    } else {
      std::printf("| %s | `%s` | %.2f | %.2f | %.1f | %.3f |\n", c.name.c_str(), c.flags.c_str(),
                  med, best, 1000.0 / med, median(ratios));
    }
  }
  if (json) std::printf("]}\n");
  return 0;
}

}  // namespace
}  // namespace kvs

int main(int argc, char** argv) { return kvs::main_impl(argc, argv); }
