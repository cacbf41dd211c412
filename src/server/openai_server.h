// OpenAiServer: the HTTP front of the engine (cpp-httplib), OpenAI-compatible.
//
//   POST /v1/completions, POST /v1/chat/completions   (non-streaming, or SSE with stream: true)
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text), GET /v1/kv (the KV pool, JSON)
//
// Handler threads parse and validate a request, tokenize it and hand it to the EngineWorker;
// every failure is an OpenAI-style error object {"error": {message, type, param, code}} with
// the right status: 400 bad input, 401 wrong API key, 404 unknown model or route, 413 body too
// large, 429 (with Retry-After) when --max-num-seqs running + --max-queued-requests waiting
// requests are already in flight. A streaming client that disconnects aborts its request; its
// blocks go back to the pool at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "model/loaded_model.h"
#include "server/engine_worker.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace kvs {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0 = any free port (see bound_port())
  std::string api_key;  // empty = no authentication
  std::string served_model_name;
  uint32_t max_queued_requests = 256;
  uint64_t max_body_bytes = uint64_t{8} << 20;
  bool log_preemptions = true;
};

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, const LoadedModel& model, const ServerConfig& config);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds the socket (port 0 picks a free one). Call before serve().
  Status bind();
  [[nodiscard]] int bound_port() const { return port_; }
  // Serves until stop() (blocking).
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvs
