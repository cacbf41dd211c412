#include "server/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

namespace kvs {

using nlohmann::json;

namespace {

constexpr const char* kCompletionsRoute = "/v1/completions";
constexpr const char* kChatRoute = "/v1/chat/completions";

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

// Serializes without ever throwing: invalid UTF-8 (e.g. echoed from a bad request body in a
// parse error message) becomes U+FFFD.
std::string to_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_body(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return {{"error", err}};
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A parsed, validated generation request plus the response options.
struct ParsedRequest {
  GenerationRequest gen;
  bool stream = false;
  bool include_usage = false;
  bool chat = false;
};

// Field readers: absent or null -> nullopt; a wrong type -> ApiError.
std::optional<ApiError> bad(const std::string& param, const std::string& message) {
  return ApiError{.status = 400, .message = message, .param = param};
}

std::optional<ApiError> read_number(const json& j, const char* key, std::optional<double>* out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) return bad(key, std::string("'") + key + "' must be a number");
  *out = j[key].get<double>();
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& j, const char* key, std::optional<int64_t>* out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) {
      *out = static_cast<int64_t>(d);
      return std::nullopt;
    }
  }
  return bad(key, std::string("'") + key + "' must be an integer");
}

std::optional<ApiError> read_bool(const json& j, const char* key, bool* out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_boolean()) return bad(key, std::string("'") + key + "' must be a boolean");
  *out = j[key].get<bool>();
  return std::nullopt;
}

std::string message_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  for (const json& part : content) {
    if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
        part["text"].is_string())
      text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

struct OpenAiServer::Impl {
  Engine& engine;
  const LoadedModel& model;
  ServerConfig config;
  ServerMetrics metrics;
  EngineWorker worker;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};

  Impl(Engine& e, const LoadedModel& m, const ServerConfig& c)
      : engine(e),
        model(m),
        config(c),
        worker(e, *m.tokenizer, metrics,
               {.max_in_flight = e.config().max_num_seqs + c.max_queued_requests,
                .log_preemptions = c.log_preemptions}) {}

  void reply_error(httplib::Response& res, const std::string& route, const ApiError& e) {
    res.status = e.status;
    res.set_content(to_text(error_body(e)), "application/json");
    metrics.count_http(route, e.status);
  }

  void reply_json(httplib::Response& res, const std::string& route, const json& body) {
    res.status = 200;
    res.set_content(to_text(body), "application/json");
    metrics.count_http(route, 200);
  }

  bool authorized(const httplib::Request& req, httplib::Response& res, const std::string& route) {
    if (config.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + config.api_key) return true;
    reply_error(res, route,
                {.status = 401,
                 .message = auth.empty() ? "missing API key (Authorization: Bearer ...)"
                                         : "incorrect API key",
                 .type = "authentication_error",
                 .code = "invalid_api_key"});
    return false;
  }

  std::optional<ApiError> parse(const json& j, bool chat, ParsedRequest* out) {
    if (!j.is_object()) return bad("", "the request body must be a JSON object");
    out->chat = chat;
    if (j.contains("model") && !j["model"].is_null()) {
      if (!j["model"].is_string()) return bad("model", "'model' must be a string");
      if (j["model"].get<std::string>() != config.served_model_name)
        return ApiError{.status = 404,
                        .message = "The model '" + j["model"].get<std::string>() +
                                   "' does not exist (this server serves '" +
                                   config.served_model_name + "')",
                        .param = "model",
                        .code = "model_not_found"};
    }
    GenerationRequest& g = out->gen;
    g.route = chat ? kChatRoute : kCompletionsRoute;
    std::optional<double> temperature, top_p;
    std::optional<int64_t> top_k, seed, max_tokens, n, priority;
    if (auto e = read_number(j, "temperature", &temperature)) return e;
    if (auto e = read_number(j, "top_p", &top_p)) return e;
    if (auto e = read_int(j, "top_k", &top_k)) return e;
    if (auto e = read_int(j, "seed", &seed)) return e;
    if (auto e = read_int(j, "max_tokens", &max_tokens)) return e;
    if (chat && !max_tokens) {
      if (auto e = read_int(j, "max_completion_tokens", &max_tokens)) return e;
    }
    if (auto e = read_int(j, "n", &n)) return e;
    if (auto e = read_int(j, "priority", &priority)) return e;
    if (auto e = read_bool(j, "stream", &out->stream)) return e;
    if (auto e = read_bool(j, "ignore_eos", &g.ignore_eos)) return e;
    if (j.contains("stream_options") && !j["stream_options"].is_null()) {
      const json& so = j["stream_options"];
      if (!so.is_object()) return bad("stream_options", "'stream_options' must be an object");
      if (auto e = read_bool(so, "include_usage", &out->include_usage)) return e;
    }
    if (temperature) {
      if (*temperature < 0 || *temperature > 2)
        return bad("temperature", "'temperature' must be between 0 and 2");
      g.sampling.temperature = static_cast<float>(*temperature);
    }
    if (top_p) {
      if (!(*top_p > 0 && *top_p <= 1)) return bad("top_p", "'top_p' must be in (0, 1]");
      g.sampling.top_p = static_cast<float>(*top_p);
    }
    if (top_k) {
      if (*top_k < -1 || *top_k > 1000000)
        return bad("top_k", "'top_k' must be -1 (no limit), 0 (no limit) or positive");
      g.sampling.top_k = *top_k == -1 ? 0 : static_cast<int32_t>(*top_k);
    }
    if (seed) g.sampling.seed = static_cast<uint64_t>(*seed);
    if (n) {
      if (*n < 1 || *n > 16) return bad("n", "'n' must be between 1 and 16");
      g.n = static_cast<uint32_t>(*n);
    }
    if (priority) {
      if (*priority < INT32_MIN || *priority > INT32_MAX)
        return bad("priority", "'priority' is out of range");
      g.priority = static_cast<int32_t>(*priority);
    }
    if (j.contains("cache_salt") && !j["cache_salt"].is_null()) {
      if (!j["cache_salt"].is_string()) return bad("cache_salt", "'cache_salt' must be a string");
      g.cache_salt = j["cache_salt"].get<std::string>();
      if (g.cache_salt.size() > 256) return bad("cache_salt", "'cache_salt' is at most 256 bytes");
    }
    if (j.contains("stop") && !j["stop"].is_null()) {
      const json& s = j["stop"];
      if (s.is_string()) {
        g.stop.push_back(s.get<std::string>());
      } else if (s.is_array() && s.size() <= 16) {
        for (const json& x : s) {
          if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
          g.stop.push_back(x.get<std::string>());
        }
      } else {
        return bad("stop", "'stop' must be a string or an array of at most 16 strings");
      }
      for (const std::string& x : g.stop) {
        if (x.empty()) return bad("stop", "stop strings must not be empty");
        // The engine thread matches them against every sample's text: keep that cheap.
        if (x.size() > 256) return bad("stop", "stop strings must be at most 256 bytes");
      }
    }
    // The prompt.
    const Tokenizer& tok = *model.tokenizer;
    if (chat) {
      if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
        return bad("messages", "'messages' must be a non-empty array");
      if (!model.chat_template) return bad("messages", "the model has no chat template");
      std::vector<ChatMessage> msgs;
      for (const json& m : j["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
          return bad("messages", "every message needs a string 'role'");
        const json content = m.contains("content") ? m["content"] : json(nullptr);
        if (!content.is_null() && !content.is_string() && !content.is_array())
          return bad("messages", "a message 'content' must be a string or an array of parts");
        msgs.push_back({m["role"].get<std::string>(),
                        content.is_null() ? std::string() : message_text(content)});
      }
      const std::string text = model.chat_template->render(msgs, true);
      g.prompt = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
    } else {
      if (!j.contains("prompt")) return bad("prompt", "'prompt' is required");
      const json& p = j["prompt"];
      if (p.is_string()) {
        g.prompt = tok.encode(p.get<std::string>(), true, true);
      } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
        g.prompt = tok.encode(p[0].get<std::string>(), true, true);
      } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        for (const json& t : p) {
          if (!t.is_number_integer()) return bad("prompt", "token ids must be integers");
          const int64_t id = t.get<int64_t>();
          if (id < 0 || id >= static_cast<int64_t>(model.spec.vocab_size))
            return bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary");
          g.prompt.push_back(static_cast<int32_t>(id));
        }
      } else {
        return bad("prompt",
                   "'prompt' must be a string, an array of one string or an array of token ids");
      }
    }
    if (g.prompt.empty()) return bad(chat ? "messages" : "prompt", "the prompt is empty");
    const uint64_t max_len = engine.max_model_len();
    const uint64_t pool_tokens = engine.pool_info().num_tokens;
    const uint64_t plen = g.prompt.size();
    if (plen > max_len || plen >= pool_tokens)
      return ApiError{.status = 400,
                      .message = "This model's maximum context length is " +
                                 std::to_string(max_len) +
                                 " tokens (KV pool: " + std::to_string(pool_tokens) +
                                 "); the prompt has " + std::to_string(plen) + " tokens",
                      .param = chat ? "messages" : "prompt",
                      .code = "context_length_exceeded"};
    const uint64_t room = std::min(max_len, pool_tokens) - plen;
    if (max_tokens) {
      if (*max_tokens < 1) return bad("max_tokens", "'max_tokens' must be at least 1");
      if (static_cast<uint64_t>(*max_tokens) > room)
        return ApiError{.status = 400,
                        .message = "max_tokens (" + std::to_string(*max_tokens) +
                                   ") + the prompt (" + std::to_string(plen) +
                                   " tokens) exceed what fits: " + std::to_string(room) +
                                   " tokens at most (--max-model-len " + std::to_string(max_len) +
                                   ", KV pool " + std::to_string(pool_tokens) + " tokens)",
                        .param = "max_tokens",
                        .code = "context_length_exceeded"};
      g.max_tokens = static_cast<uint32_t>(*max_tokens);
    } else {
      // OpenAI's completions default is 16; chat defaults to whatever fits (as vLLM).
      g.max_tokens = static_cast<uint32_t>(chat ? room : std::min<uint64_t>(16, room));
    }
    if (g.max_tokens == 0) return bad("max_tokens", "no room left for any output token");
    const Status st = g.sampling.validate();
    if (!st.is_ok()) return bad("", st.message());
    return std::nullopt;
  }

  json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  }

  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string route = chat ? kChatRoute : kCompletionsRoute;
    if (!authorized(req, res, route)) return;
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      reply_error(res, route, {.status = 400, .message = std::string("invalid JSON: ") + e.what()});
      return;
    }
    ParsedRequest p;
    if (auto err = parse(body, chat, &p)) {
      reply_error(res, route, *err);
      return;
    }
    const uint32_t n = p.gen.n;
    std::shared_ptr<RequestChannel> ch = worker.submit(std::move(p.gen));
    if (!ch) {
      res.set_header("Retry-After", "1");
      reply_error(res, route,
                  {.status = 429,
                   .message = "the server is at capacity (--max-num-seqs running + "
                              "--max-queued-requests waiting); retry later",
                   .type = "rate_limit_error",
                   .code = "rate_limit_exceeded"});
      return;
    }
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = unix_now();
    if (p.stream) {
      stream(res, route, ch, id, created, chat, p.include_usage, n);
      return;
    }
    std::vector<std::string> texts(n);
    std::vector<std::string> reasons(n, "stop");
    std::vector<ChoiceDelta> deltas;
    for (;;) {
      deltas.clear();
      const bool done = ch->wait(&deltas, std::chrono::milliseconds(1000));
      for (ChoiceDelta& d : deltas) {
        if (d.index >= n) continue;
        texts[d.index] += d.text;
        if (d.finish_reason) reasons[d.index] = d.finish_reason;
      }
      if (done) break;
    }
    if (!ch->error().empty()) {
      reply_error(res, route, {.status = 400, .message = ch->error()});
      return;
    }
    json choices = json::array();
    for (uint32_t i = 0; i < n; ++i) {
      json c = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", reasons[i]}};
      if (chat)
        c["message"] = {{"role", "assistant"}, {"content", texts[i]}};
      else
        c["text"] = texts[i];
      choices.push_back(std::move(c));
    }
    reply_json(res, route,
               {{"id", id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", created},
                {"model", config.served_model_name},
                {"choices", choices},
                {"usage", usage_json(ch->usage())}});
  }

  struct StreamState {
    std::shared_ptr<RequestChannel> channel;
    std::string id;
    int64_t created = 0;
    bool chat = false;
    bool include_usage = false;
    std::vector<bool> role_sent;
    bool finished = false;
    Clock::time_point last_write = Clock::now();
  };

  json chunk(const StreamState& st, json choices) {
    json c = {{"id", st.id},
              {"object", st.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", st.created},
              {"model", config.served_model_name},
              {"choices", std::move(choices)}};
    if (st.include_usage) c["usage"] = nullptr;
    return c;
  }

  void stream(httplib::Response& res, const std::string& route, std::shared_ptr<RequestChannel> ch,
              const std::string& id, int64_t created, bool chat, bool include_usage, uint32_t n) {
    auto st = std::make_shared<StreamState>();
    st->channel = std::move(ch);
    st->id = id;
    st->created = created;
    st->chat = chat;
    st->include_usage = include_usage;
    st->role_sent.assign(n, false);
    metrics.count_http(route, 200);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            st->last_write = Clock::now();
            return sink.write(s.data(), s.size());
          };
          std::vector<ChoiceDelta> deltas;
          const bool done = st->channel->wait(&deltas, std::chrono::milliseconds(250));
          for (const ChoiceDelta& d : deltas) {
            json c = {{"index", d.index},
                      {"logprobs", nullptr},
                      {"finish_reason", d.finish_reason ? json(d.finish_reason) : json(nullptr)}};
            if (st->chat) {
              json delta = json::object();
              if (d.index < st->role_sent.size() && !st->role_sent[d.index]) {
                delta["role"] = "assistant";
                st->role_sent[d.index] = true;
              }
              if (!d.text.empty() || d.finish_reason == nullptr) delta["content"] = d.text;
              c["delta"] = std::move(delta);
            } else {
              c["text"] = d.text;
            }
            if (!write("data: " + to_text(chunk(*st, json::array({c}))) + "\n\n")) return false;
          }
          if (!done) {
            // A comment line now and then: a client that went away makes the write fail.
            if (deltas.empty() && Clock::now() - st->last_write > std::chrono::milliseconds(500))
              return write(": keep-alive\n\n");
            return true;
          }
          st->finished = true;
          if (!st->channel->error().empty()) {
            ApiError e{.status = 400, .message = st->channel->error()};
            write("data: " + to_text(error_body(e)) + "\n\n");
          } else if (st->include_usage) {
            json last = chunk(*st, json::array());
            last["usage"] = usage_json(st->channel->usage());
            if (!write("data: " + to_text(last) + "\n\n")) return false;
          }
          write("data: [DONE]\n\n");
          sink.done();
          return true;
        },
        [this, st](bool) {
          // The client went away (or the write failed) before the end: abort the request.
          if (!st->finished) worker.cancel(st->channel);
        });
  }

  EngineSnapshot snapshot(Engine& e) {
    EngineSnapshot s;
    const Scheduler& sch = e.scheduler();
    s.running = sch.num_running();
    s.waiting = sch.num_waiting();
    s.swapped = sch.num_swapped();
    const KvCacheStats cs = e.cache().stats();
    s.blocks_total = cs.num_blocks;
    s.blocks_free = cs.blocks_free;
    s.blocks_cached_free = cs.blocks_cached_free;
    s.blocks_in_use = cs.blocks_in_use;
    s.usage = cs.usage;
    s.fragmentation = cs.fragmentation;
    s.prefix_query_tokens = cs.prefix_query_tokens;
    s.prefix_hit_tokens = cs.prefix_hit_tokens;
    s.evictions = cs.evictions;
    s.preemptions_recompute = e.num_preemptions(PreemptionMode::kRecompute);
    s.preemptions_swap = e.num_preemptions(PreemptionMode::kSwap);
    s.swap_used_bytes = sch.swap_used_bytes();
    s.swap_space_bytes = e.config().swap_space;
    s.pool_bytes = e.pool_info().pool_bytes;
    s.block_bytes = e.pool_info().block_bytes;
    for (const TenantStats& t : e.cache().tenant_stats())
      s.tenants.push_back({.label = tenant_label(t.cache_salt),
                           .query_tokens = t.prefix_query_tokens,
                           .hit_tokens = t.prefix_hit_tokens,
                           .blocks_held = t.blocks_held});
    return s;
  }

  json kv_json(Engine& e) {
    const auto infos = e.cache().block_infos();
    const auto tenants = e.cache().tenant_stats();
    const KvCacheStats cs = e.cache().stats();
    json blocks = json::array();
    for (uint32_t b = 0; b < infos.size(); ++b) {
      const BlockInfo& i = infos[b];
      const char* state = i.state == BlockState::kFree         ? "free"
                          : i.state == BlockState::kCachedFree ? "cached_free"
                                                               : "in_use";
      blocks.push_back({{"id", b},
                        {"state", state},
                        {"owners", i.refcount},
                        {"tenant", i.state == BlockState::kFree || i.tenant >= tenants.size()
                                       ? json(nullptr)
                                       : json(tenant_label(tenants[i.tenant].cache_salt))},
                        {"fill", i.filled}});
    }
    return {{"block_size", cs.block_size},
            {"num_blocks", cs.num_blocks},
            {"block_bytes", e.pool_info().block_bytes},
            {"summary",
             {{"free", cs.blocks_free},
              {"cached_free", cs.blocks_cached_free},
              {"in_use", cs.blocks_in_use},
              {"usage", cs.usage},
              {"fragmentation", cs.fragmentation},
              {"sequences", cs.num_sequences}}},
            {"blocks", std::move(blocks)}};
  }

  void routes() {
    http.Post(kCompletionsRoute, [this](const httplib::Request& req, httplib::Response& res) {
      handle_generate(req, res, false);
    });
    http.Post(kChatRoute, [this](const httplib::Request& req, httplib::Response& res) {
      handle_generate(req, res, true);
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res, "/v1/models")) return;
      json m = {{"id", config.served_model_name},
                {"object", "model"},
                {"created", unix_now()},
                {"owned_by", "kvserve"},
                {"max_model_len", engine.max_model_len()}};
      reply_json(res, "/v1/models", {{"object", "list"}, {"data", json::array({m})}});
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      reply_json(res, "/health", {{"status", "ok"}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      EngineSnapshot snap;
      worker.run_on_engine([&](Engine& e) { snap = snapshot(e); });
      metrics.count_http("/metrics", 200);
      res.set_content(metrics.render(snap), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/v1/kv", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res, "/v1/kv")) return;
      json j;
      worker.run_on_engine([&](Engine& e) { j = kv_json(e); });
      reply_json(res, "/v1/kv", j);
    });
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e{.status = res.status};
      if (res.status == 404) {
        e.message = "no such route";
        e.code = "not_found";
      } else if (res.status == 413) {
        e.message = "the request body is too large";
      } else {
        e.message = "HTTP error " + std::to_string(res.status);
      }
      res.set_content(to_text(error_body(e)), "application/json");
    });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& ex) {
            what = ex.what();
          } catch (...) {
          }
          res.status = 500;
          res.set_content(
              to_text(error_body({.status = 500, .message = what, .type = "internal_error"})),
              "application/json");
        });
  }
};

OpenAiServer::OpenAiServer(Engine& engine, const LoadedModel& model, const ServerConfig& config)
    : impl_(std::make_unique<Impl>(engine, model, config)) {
  Impl& s = *impl_;
  // One handler thread per in-flight request (a stream holds its thread) plus spares for
  // /metrics, /health and fast 429 answers.
  const size_t threads = s.engine.config().max_num_seqs + config.max_queued_requests + 16;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(config.max_body_bytes);
  s.http.set_keep_alive_max_count(1000);
  s.routes();
}

OpenAiServer::~OpenAiServer() { stop(); }

Status OpenAiServer::bind() {
  Impl& s = *impl_;
  if (s.config.port == 0) {
    port_ = s.http.bind_to_any_port(s.config.host);
  } else {
    port_ = s.http.bind_to_port(s.config.host, s.config.port) ? s.config.port : -1;
  }
  if (port_ <= 0)
    return io_error("cannot listen on " + s.config.host + ":" + std::to_string(s.config.port) +
                    " (address in use or not available)");
  return Status::ok();
}

void OpenAiServer::serve() {
  impl_->worker.start();
  impl_->http.listen_after_bind();
  impl_->worker.stop();
}

void OpenAiServer::stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace kvs
