// OpenAiServer: the HTTP front of the engine (cpp-httplib), OpenAI-compatible. This file holds
// the routes; request_parser.h validates bodies, response_json.h builds the answers.
//
//   POST /v1/completions, POST /v1/chat/completions   (non-streaming, or SSE with stream: true)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text), GET /v1/kv (the KV pool, JSON),
//   GET  /debug/integrity (the cache manager's integrity check)
//   GET  /dashboard, GET /v1/kv/stream (the live view of the cache: dashboard_routes.h)
//
// With API keys (api_keys.h) every route but /health needs "Authorization: Bearer KEY"; each key
// belongs to a tenant whose requests share one prefix-cache namespace. /metrics is open only
// with public_metrics.
//
// A generation request is refused with 429 (Retry-After) before its body is parsed when
// --max-num-seqs running + --max-queued-requests waiting requests are already in flight. Every
// failure is an OpenAI-style error object {"error": {message, type, param, code}}: 400 bad
// input, 401 wrong API key, 404 unknown model or route, 413 body too large, 429 at capacity,
// 503 shutting down. A client that disconnects aborts its request: a streaming one at the next
// write, a non-streaming one within about half a second once its first token exists (the
// response is then sent chunked, and blank keep-alive bytes probe the connection).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "model/loaded_model.h"
#include "server/access_log.h"
#include "server/api_keys.h"
#include "server/engine_worker.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace kvs {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;   // 0 = any free port (see bound_port())
  ApiKeys api_keys;  // none = no authentication, one tenant
  std::string served_model_name;
  uint32_t max_queued_requests = 256;
  uint64_t max_body_bytes = uint64_t{8} << 20;
  bool log_preemptions = true;
  bool public_metrics = false;      // /metrics without a key even when keys are set
  size_t max_tenant_metrics = 100;  // tenant label series in /metrics; the rest are "other"
  bool trust_message_special_tokens = false;  // parse control tokens in chat message content
  uint32_t max_logprobs = 20;  // the most top alternatives per token a request may ask for
  double tenant_idle_seconds = 600;
  uint32_t max_dashboards = 4;            // /v1/kv/stream subscribers at once (each holds a thread)
  KvEventPublisher* kv_events = nullptr;  // --kv-events-endpoint (not owned); null = off
  LogFormat log_format = LogFormat::kText;  // the access log and server messages
  LogLevel log_level = LogLevel::kInfo;     // info: one access line per request
};

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, const LoadedModel& model, ServerConfig config);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds the socket (port 0 picks a free one). Call before serve().
  Status bind();
  [[nodiscard]] int bound_port() const { return port_; }
  // Serves until stop() (blocking).
  void serve();
  void stop();
  // Graceful shutdown, first step: new generation requests get 503 with Retry-After and
  // /health answers 503 "draining"; requests already admitted run to their end.
  void begin_draining();
  // True once no generation request is in progress (every one has sent its last byte).
  [[nodiscard]] bool drained() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvs
