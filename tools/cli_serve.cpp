// kvserve serve: the OpenAI-compatible HTTP server. Prints the capacity report (weights, KV
// bytes per token with the formula's numbers, pool, maximum concurrency at --max-model-len) and
// refuses to start when one request of --max-model-len tokens cannot fit.
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <zmq.h>

#include "core/byte_size.h"
#include "server/openai_server.h"
#include "tools/cli_commands.h"
#include "tools/cli_common.h"
#include "tools/cli_common_flags.h"

namespace kvs::cli {
namespace {

struct ServeFlags {
  EngineFlags engine;
  std::string swap_space = "0";
  std::string preemption_mode = "recompute";
  uint32_t max_queued_requests = 256;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> api_keys;
  std::string api_keys_file;
  bool public_metrics = false;
  size_t max_tenant_metrics = 100;
  bool trust_message_special_tokens = false;
  uint32_t max_logprobs = 20;
  std::string served_model_name;
  std::string max_body = "8MiB";
  bool quiet_preemptions = false;
  double shutdown_timeout = 30;
  std::string log_format = "text";
  std::string log_level = "info";
  std::string kv_events_endpoint;
  std::string kv_events_replay_endpoint;
  std::string kv_events_topic;
  bool kv_events_allow_remote = false;
  bool kv_events_token_ids = true;
  std::string kv_events_curve_secret_file;
  std::string kv_events_curve_clients;
  std::string step_log;
};

std::string commas(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

void run_serve(ServeFlags& f) {
  // SIGINT/SIGTERM go to one waiting thread that stops the server (no work in a signal
  // handler). Blocked before any thread starts (the engine's workers inherit the mask).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  auto model = load_model_or_fail(f.engine);
  EngineConfig config = engine_config_or_fail(f.engine, *model);
  auto swap = parse_byte_size(f.swap_space);
  if (!swap.is_ok()) fail("--swap-space: " + swap.status().message());
  config.swap_space = *swap;
  auto mode = parse_preemption_mode(f.preemption_mode);
  if (!mode.is_ok()) fail(mode.status().message());
  config.preemption_mode = *mode;
  // Swap mode without room for a block in --swap-space is refused by Engine::create
  // (swap_host_blocks, step_driver.h), as by kvserve simulate.
  auto body = parse_byte_size(f.max_body);
  if (!body.is_ok()) fail("--max-body: " + body.status().message());
  if (f.port < 0 || f.port > 65535) fail("--port must be between 0 and 65535");

  const ModelSpec& spec = model->spec;
  const uint32_t max_len = config.max_model_len ? config.max_model_len : spec.context_length;
  auto pool =
      plan_kv_pool(spec.kv_model_shape(config.k_dtype, config.v_dtype, config.layer_formats),
                   config.kv_cache_memory, config.block_size, config.max_num_seqs,
                   config.recent_window, config.attention_sink, config.recent_window_dtype);
  if (!pool.is_ok()) fail(pool.status().message());
  const KvPoolPlan& p = *pool;
  // The most blocks one request of max_len tokens holds (all layer groups; a sliding group holds
  // its window + a prefill chunk, kv_pool_plan.h): what must fit for it to run alone.
  const uint64_t blocks_per_seq =
      sequence_footprint(p, max_len, config.max_num_batched_tokens).blocks;
  std::fprintf(stderr,
               "kvserve serve: %s\n"
               "  weights              %s (%s B)\n"
               "  KV bytes per token   layers x 2 x kv_heads x head_dim x bytes = %s (%s)\n"
               "  KV pool              %s = %s B in %u blocks of %u tokens = %s tokens\n"
               "  max model len        %u tokens (%llu blocks)\n"
               "  maximum concurrency at --max-model-len %u: %.2f requests (%llu fully "
               "reserved)\n",
               model->path.c_str(), format_bytes_binary(model->model->weight_bytes()).c_str(),
               commas(model->model->weight_bytes()).c_str(), p.formula.c_str(),
               kv_dtype_name(config.k_dtype), format_bytes_binary(p.pool_bytes).c_str(),
               commas(p.pool_bytes).c_str(), p.num_blocks, p.block_size,
               commas(p.num_tokens).c_str(), max_len,
               static_cast<unsigned long long>(blocks_per_seq), max_len,
               static_cast<double>(p.num_blocks) / static_cast<double>(blocks_per_seq),
               static_cast<unsigned long long>(p.num_blocks / blocks_per_seq));
  if (p.key_tail_bytes > 0)
    std::fprintf(stderr,
                 "  key tails            %s = %s B before the pool: the f16 keys of the partly "
                 "filled 16-token group of up to %u sequences (per-channel K)\n",
                 format_bytes_binary(p.key_tail_bytes).c_str(), commas(p.key_tail_bytes).c_str(),
                 config.max_num_seqs);
  if (p.recent_window_bytes > 0)
    std::fprintf(stderr,
                 "  recent window        %s = %s B before the pool: the newest %u-%u tokens of up "
                 "to %u sequences in f16, K and V%s\n",
                 format_bytes_binary(p.recent_window_bytes).c_str(),
                 commas(p.recent_window_bytes).c_str(), p.recent_window, p.recent_window + 15,
                 config.max_num_seqs, p.attention_sink ? ", and position 0 (attention sink)" : "");
  if (p.num_blocks < blocks_per_seq) {
    const uint64_t need = blocks_per_seq * p.block_bytes;
    fail("one request of --max-model-len " + std::to_string(max_len) + " tokens needs " +
         std::to_string(blocks_per_seq) + " blocks (" + commas(need) + " B) but the pool has " +
         std::to_string(p.num_blocks) + ": raise --kv-cache-memory by " +
         commas(need - p.pool_bytes) + " B to at least " + format_bytes_binary(need) + " (" +
         commas(need) + " B), or lower --max-model-len to " + std::to_string(p.num_tokens));
  }
  if (config.max_model_len == 0) config.max_model_len = max_len;
  if (f.kv_events_endpoint.empty() && !f.kv_events_replay_endpoint.empty())
    fail("--kv-events-replay-endpoint needs --kv-events-endpoint");
  config.kv_events = !f.kv_events_endpoint.empty();
  // Opened before the engine so that it outlives it.
  std::unique_ptr<StepLog> step_log;
  if (!f.step_log.empty()) {
    auto opened = StepLog::open(f.step_log);
    if (!opened.is_ok()) fail(opened.status().message());
    step_log = std::move(opened).value();
  }
  auto engine = create_engine_or_fail(*model, config);
  engine->set_step_log(step_log.get());
  std::unique_ptr<KvEventPublisher> kv_events;
  if (config.kv_events) {
    KvEventPublisherConfig ec{.endpoint = f.kv_events_endpoint,
                              .replay_endpoint = f.kv_events_replay_endpoint,
                              .topic = f.kv_events_topic,
                              .block_size = config.block_size,
                              .allow_remote = f.kv_events_allow_remote,
                              .token_ids = f.kv_events_token_ids};
    std::string curve_public;
    if (!f.kv_events_curve_secret_file.empty()) {
      auto secret = read_curve_keys(f.kv_events_curve_secret_file, /*secret=*/true);
      if (!secret.is_ok()) fail("--kv-events-curve-secret-file: " + secret.status().message());
      ec.curve_secret_key = (*secret)[0];
      char pub[41];
      if (zmq_curve_public(pub, ec.curve_secret_key.c_str()) == 0) curve_public = pub;
    }
    if (!f.kv_events_curve_clients.empty()) {
      auto clients = read_curve_keys(f.kv_events_curve_clients, /*secret=*/false);
      if (!clients.is_ok()) fail("--kv-events-curve-clients: " + clients.status().message());
      ec.curve_client_keys = std::move(clients).value();
    }
    auto p = KvEventPublisher::create(ec);
    if (!p.is_ok()) fail(p.status().message());
    kv_events = std::move(p).value();
    std::fprintf(stderr, "kvserve serve: KV events on %s%s%s%s%s%s\n", f.kv_events_endpoint.c_str(),
                 f.kv_events_replay_endpoint.empty() ? "" : ", replay on ",
                 f.kv_events_replay_endpoint.c_str(),
                 curve_public.empty() ? "" : ", CURVE server key ", curve_public.c_str(),
                 f.kv_events_token_ids ? "" : ", without token ids");
    if (f.kv_events_allow_remote && curve_public.empty())
      std::fprintf(stderr,
                   "kvserve serve: warning: KV events may bind beyond loopback without CURVE: "
                   "anyone who reaches the port reads every tenant's block hashes%s\n",
                   f.kv_events_token_ids ? " and token ids" : "");
  }

  std::vector<ApiKeyEntry> key_entries = ApiKeys::from_flags(f.api_keys, engine->secret());
  if (!f.api_keys_file.empty()) {
    auto from_file = ApiKeys::read_file(f.api_keys_file);
    if (!from_file.is_ok()) fail(from_file.status().message());
    key_entries.insert(key_entries.end(), from_file->begin(), from_file->end());
  }
  auto keys = ApiKeys::create(std::move(key_entries));
  if (!keys.is_ok()) fail(keys.status().message());
  const Result<LogFormat> log_format = parse_log_format(f.log_format);
  if (!log_format.is_ok()) fail(log_format.status().message());
  const Result<LogLevel> log_level = parse_log_level(f.log_level);
  if (!log_level.is_ok()) fail(log_level.status().message());
  ServerConfig sc{.host = f.host,
                  .port = f.port,
                  .api_keys = std::move(keys).value(),
                  .served_model_name = f.served_model_name,
                  .max_queued_requests = f.max_queued_requests,
                  .max_body_bytes = *body,
                  .log_preemptions = !f.quiet_preemptions && *log_level <= LogLevel::kInfo,
                  .public_metrics = f.public_metrics,
                  .max_tenant_metrics = f.max_tenant_metrics,
                  .trust_message_special_tokens = f.trust_message_special_tokens,
                  .max_logprobs = f.max_logprobs,
                  .kv_events = kv_events.get(),
                  .log_format = *log_format,
                  .log_level = *log_level};
  if (sc.served_model_name.empty())
    sc.served_model_name = std::filesystem::path(model->path).stem().string();

  const std::string served_name = sc.served_model_name;
  const std::string host = sc.host;
  OpenAiServer server(*engine, *model, std::move(sc));
  const Status bound = server.bind();
  if (!bound.is_ok()) fail(bound.message());
  std::fprintf(stderr, "kvserve serve: model '%s', listening on http://%s:%d\n",
               served_name.c_str(), host.c_str(), server.bound_port());
  const double shutdown_timeout = f.shutdown_timeout;
  std::thread waiter([&server, sigs, shutdown_timeout] {
    int sig = 0;
    sigwait(&sigs, &sig);
    // Graceful: stop admitting, let the running requests finish (up to --shutdown-timeout; a
    // second signal cuts it short), then stop; the tiers are written down as the engine stops.
    std::fprintf(stderr,
                 "kvserve serve: signal %d, draining: new requests get 503, running ones have "
                 "up to %.0f s (a second signal stops now)\n",
                 sig, shutdown_timeout);
    server.begin_draining();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(shutdown_timeout);
    const timespec poll{.tv_sec = 0, .tv_nsec = 50'000'000};
    while (!server.drained()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::fprintf(stderr, "kvserve serve: --shutdown-timeout reached, stopping the rest\n");
        break;
      }
      if (sigtimedwait(&sigs, nullptr, &poll) > 0) {
        std::fprintf(stderr, "kvserve serve: second signal, stopping now\n");
        break;
      }
    }
    std::fprintf(stderr, "kvserve serve: stopping\n");
    server.stop();
  });
  waiter.detach();
  server.serve();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (continuous batching, prefix caching, /metrics)");
  add_engine_flags(cmd, &flags->engine);
  add_preemption_flags(*cmd, &flags->preemption_mode, &flags->swap_space, FlagRole::kEngine);
  cmd->add_option("--max-queued-requests", flags->max_queued_requests,
                  "requests waiting beyond --max-num-seqs before 429")
      ->capture_default_str();
  cmd->add_option("--host", flags->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", flags->port, "port (0 = any free port)")->capture_default_str();
  cmd->add_option("--api-key", flags->api_keys,
                  "require 'Authorization: Bearer KEY' (repeatable; each key is its own tenant, "
                  "named key:<hex> from the key and the server secret; tenants never share KV)");
  cmd->add_option("--api-keys", flags->api_keys_file,
                  "file of 'TENANT KEY [admin]' lines: keys, the tenant each belongs to, and "
                  "which may see every tenant in /v1/kv and /metrics (docs/security.md)");
  cmd->add_flag("--public-metrics", flags->public_metrics,
                "serve /metrics without a key even when API keys are set");
  cmd->add_option("--max-tenant-metrics", flags->max_tenant_metrics,
                  "tenant label series in /metrics (the rest are summed as tenant=\"other\")")
      ->capture_default_str();
  cmd->add_flag("--trust-message-special-tokens", flags->trust_message_special_tokens,
                "parse control tokens (e.g. <|im_end|>) written inside chat message content "
                "(off: content is plain text and cannot forge turns)");
  cmd->add_option("--max-logprobs", flags->max_logprobs,
                  "the most top alternatives per token a request may ask for (completions' "
                  "logprobs, chat's top_logprobs)")
      ->check(CLI::Range(0u, kMaxLogprobs))
      ->capture_default_str();
  cmd->add_option("--served-model-name", flags->served_model_name,
                  "model name of the API (default: the GGUF file's stem)");
  cmd->add_option("--max-body", flags->max_body, "largest request body (413 beyond)")
      ->capture_default_str();
  cmd->add_flag("--quiet-preemptions", flags->quiet_preemptions,
                "do not log each preemption on stderr");
  cmd->add_option("--shutdown-timeout", flags->shutdown_timeout,
                  "seconds running requests may take to finish after SIGTERM/SIGINT (new ones get "
                  "503 meanwhile); then the server stops and writes its tiers down")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--log-format", flags->log_format,
                  "text or json: the shape of the access log (one line per request on stderr: "
                  "id, tenant label, route, status, prompt/cached/output tokens, TTFT, total "
                  "time; never the prompt) and of warnings")
      ->capture_default_str();
  cmd->add_option("--log-level", flags->log_level,
                  "debug, info (access lines and preemptions), warning (unknown request fields) "
                  "or error")
      ->capture_default_str();
  cmd->add_option("--kv-events-endpoint", flags->kv_events_endpoint,
                  "publish KV cache events in vLLM's format on a ZeroMQ PUB socket bound here, "
                  "e.g. tcp://127.0.0.1:5557 (default: off; docs/scale-out.md)");
  cmd->add_option("--kv-events-replay-endpoint", flags->kv_events_replay_endpoint,
                  "ZeroMQ ROUTER socket bound here answers replay requests for missed batches, "
                  "e.g. tcp://127.0.0.1:5558");
  cmd->add_option("--kv-events-topic", flags->kv_events_topic,
                  "topic frame of every KV event message (default: empty, as vLLM)");
  cmd->add_flag("--kv-events-allow-remote", flags->kv_events_allow_remote,
                "let the KV event endpoints bind beyond loopback (they carry every tenant's "
                "block hashes; authenticate subscribers with --kv-events-curve-*)");
  add_on_off_flags(*cmd, "kv-events-token-ids", &flags->kv_events_token_ids,
                   "BlockStored events carry the blocks' token ids (as vLLM)",
                   "BlockStored events leave the token ids out");
  cmd->add_option("--kv-events-curve-secret-file", flags->kv_events_curve_secret_file,
                  "CURVE secret key of the KV event sockets (kvserve keygen --curve-secret); "
                  "with --kv-events-curve-clients only those subscribers are admitted");
  cmd->add_option("--kv-events-curve-clients", flags->kv_events_curve_clients,
                  "file of admitted subscribers' CURVE public keys (Z85, one per line)");
  add_step_log_flag(*cmd, &flags->step_log, FlagRole::kEngine);
  add_config_flag(*cmd);
  cmd->callback([flags] { run_serve(*flags); });
}

}  // namespace kvs::cli
