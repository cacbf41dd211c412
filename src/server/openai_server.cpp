#include "server/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/json_nesting.h"
#include "server/dashboard_routes.h"
#include "server/kv_view_cache.h"
#include "server/kv_view_json.h"
#include "server/request_fields.h"
#include "server/request_parser.h"
#include "server/response_json.h"

namespace kvs {

using nlohmann::json;

namespace {

constexpr const char* kCompletionsRoute = "/v1/completions";
constexpr const char* kChatRoute = "/v1/chat/completions";

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t max_prompt_bytes(const Engine& e, const Tokenizer& tok) {
  // A text longer than this cannot encode to max_model_len tokens or fewer.
  const unsigned __int128 b =
      static_cast<unsigned __int128>(e.max_model_len()) * tok.max_token_bytes();
  return b > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(b);
}

}  // namespace

struct OpenAiServer::Impl {
  Engine& engine;
  const LoadedModel& model;
  ServerConfig config;
  ServerMetrics metrics;
  TenantLabeler labeler;
  RequestParser parser;
  EngineWorker worker;
  KvViewCache views;  // every view /v1/kv, /metrics and the stream read (kv_view_cache.h)
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  // Graceful shutdown (begin_draining): refuse new generation requests; and how many are in
  // progress (from the route's entry to their access line, i.e. their last byte).
  std::atomic<bool> draining{false};
  std::atomic<uint32_t> open_requests{0};
  AccessLog access_log{config.log_format, config.log_level};  // one line per request
  // Each unknown request field, once, as a warning.
  UnknownFieldLog unknown_fields{
      [this](const std::string& line) { access_log.message(LogLevel::kWarning, line); }};
  // The /v1/kv bodies of the latest view, per scope.
  struct KvBody {
    std::shared_ptr<const KvView> view;
    std::string scope;
    std::shared_ptr<const std::string> text;
  };
  std::mutex kv_bodies_mu;
  std::vector<KvBody> kv_bodies;
  // /debug/integrity's check, run on the engine thread at most once per second.
  std::mutex integrity_mu;
  std::chrono::steady_clock::time_point integrity_at{};
  Status integrity_status = Status::ok();
  uint32_t integrity_sequences = 0;
  DashboardRoutes dashboard;  // after `worker`: its streams end before the worker stops

  Impl(Engine& e, const LoadedModel& m, ServerConfig c)
      : engine(e),
        model(m),
        config(std::move(c)),
        parser(*m.tokenizer, m.chat_template ? &*m.chat_template : nullptr,
               RequestLimits{.served_model_name = config.served_model_name,
                             .max_model_len = e.max_model_len(),
                             .pool_tokens = e.kv_pool().num_tokens,
                             .max_prompt_bytes = max_prompt_bytes(e, *m.tokenizer),
                             .trust_message_special_tokens = config.trust_message_special_tokens,
                             .max_logprobs = config.max_logprobs}),
        worker(
            e, *m.tokenizer, metrics,
            {.max_in_flight = e.config().max_num_seqs + config.max_queued_requests,
             .log_preemptions = config.log_preemptions,
             // access_log is constructed before the worker thread starts (serve()).
             .log_line = [this](const std::string& l) { access_log.message(LogLevel::kInfo, l); },
             .tenant_idle_seconds = config.tenant_idle_seconds,
             .kv_events = config.kv_events}),
        views(worker, std::chrono::milliseconds(100)),
        dashboard({.engine = e,
                   .views = views,
                   .metrics = metrics,
                   .labeler = labeler,
                   .served_model_name = config.served_model_name,
                   .max_tenant_series = config.max_tenant_metrics,
                   .max_dashboards = config.max_dashboards,
                   .key_required = config.api_keys.enabled(),
                   .authorize = [this](const httplib::Request& req, httplib::Response& res,
                                       const std::string& route) -> std::optional<ViewScope> {
                     const std::optional<Caller> c = authenticate(req, res, route);
                     if (!c) return std::nullopt;
                     return ViewScope{.tenant = c->tenant, .admin = c->admin};
                   }}) {}

  void reply_error(httplib::Response& res, const std::string& route, const ApiError& e) {
    res.status = e.status;
    res.set_content(json_text(error_body(e)), "application/json");
    metrics.count_http(route, e.status);
  }

  void reply_json(httplib::Response& res, const std::string& route, const json& body) {
    res.status = 200;
    res.set_content(json_text(body), "application/json");
    metrics.count_http(route, 200);
  }

  // The caller (without keys: the anonymous tenant, which sees everything), or nullopt after
  // answering 401.
  std::optional<Caller> authenticate(const httplib::Request& req, httplib::Response& res,
                                     const std::string& route) {
    if (!config.api_keys.enabled()) return Caller{.tenant = "", .admin = true};
    const std::string auth = req.get_header_value("Authorization");
    if (auto caller = config.api_keys.caller_of_header(auth)) return caller;
    reply_error(res, route,
                {.status = 401,
                 .message = auth.empty() ? "missing API key (Authorization: Bearer ...)"
                                         : "incorrect API key",
                 .type = "authentication_error",
                 .code = "invalid_api_key"});
    return std::nullopt;
  }

  // What the access line of one request needs besides its channel.
  struct RequestLogContext {
    std::string id = "-";
    std::string tenant = "-";
    std::string route;
    Clock::time_point start = Clock::now();
  };

  // The request's access line. `ch` (null when refused before submission) gives the tokens and
  // the time of the first token.
  // Every generation request ends here exactly once (its in-progress count drops).
  void log_request(const RequestLogContext& c, int status, const RequestChannel* ch,
                   std::string outcome) {
    open_requests.fetch_sub(1);
    if (!access_log.enabled(LogLevel::kInfo)) return;
    AccessRecord r{.request_id = c.id,
                   .tenant = c.tenant,
                   .route = c.route,
                   .status = status,
                   .total_s = std::chrono::duration<double>(Clock::now() - c.start).count(),
                   .outcome = std::move(outcome)};
    if (ch != nullptr) {
      const Usage u = ch->usage();
      r.prompt_tokens = u.prompt_tokens;
      r.cached_tokens = u.cached_tokens;
      r.output_tokens = u.completion_tokens;
      if (const auto first = ch->first_delta_at())
        r.ttft_s = std::chrono::duration<double>(*first - c.start).count();
    }
    access_log.request(r);
  }

  static std::string outcome_of(const ApiError& e) { return e.code.empty() ? e.type : e.code; }

  void refuse(httplib::Response& res, const RequestLogContext& c, const ApiError& e) {
    reply_error(res, c.route, e);
    log_request(c, e.status, nullptr, outcome_of(e));
  }

  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    RequestLogContext lc{.route = chat ? kChatRoute : kCompletionsRoute};
    const std::string& route = lc.route;
    open_requests.fetch_add(1);
    if (draining.load()) {
      res.set_header("Retry-After", "5");
      refuse(res, lc,
             {.status = 503,
              .message = "the server is shutting down; retry on another replica or later",
              .type = "service_unavailable",
              .code = "shutting_down"});
      return;
    }
    const std::optional<Caller> caller = authenticate(req, res, route);
    if (!caller) {
      log_request(lc, res.status, nullptr, "invalid_api_key");
      return;
    }
    lc.tenant = labeler.label(caller->tenant + '\x1f');
    // Capacity first: a refused request costs no parsing or tokenization.
    AdmissionTicket ticket = worker.try_reserve();
    if (!ticket) {
      res.set_header("Retry-After", "1");
      refuse(res, lc,
             {.status = 429,
              .message = "the server is at capacity (--max-num-seqs running + "
                         "--max-queued-requests waiting); retry later",
              .type = "rate_limit_error",
              .code = "rate_limit_exceeded"});
      return;
    }
    json body;
    if (const Status deep = check_json_nesting(req.body, "the request body"); !deep.is_ok()) {
      refuse(res, lc, {.status = 400, .message = deep.message()});
      return;
    }
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      refuse(res, lc, {.status = 400, .message = std::string("invalid JSON: ") + e.what()});
      return;
    }
    ParsedRequest p;
    if (auto err = parser.parse(body, chat, &p)) {
      refuse(res, lc, *err);
      return;
    }
    unknown_fields.note(p.unknown_fields);
    p.gen.tenant = caller->tenant;
    const uint32_t n = p.gen.n;
    const bool logprobs = p.gen.sampling.logprobs.has_value();
    std::shared_ptr<RequestChannel> ch = worker.submit(std::move(ticket), std::move(p.gen));
    const CompletionIds ids{.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++),
                            .created = unix_now(),
                            .model = config.served_model_name,
                            .chat = chat,
                            .logprobs = logprobs};
    lc.id = ids.id;
    if (p.stream) {
      stream(res, lc, ch, ids, p.include_usage, n);
    } else {
      respond_whole(res, lc, ch, ids, n);
    }
  }

  // Non-streaming: the status is decided by the first event (a token, or a failure before any
  // token). From then on the body is sent chunked: blank keep-alive bytes (JSON allows leading
  // whitespace) every 250 ms make a write fail soon after the client has gone, which aborts
  // the request instead of generating up to max_tokens for nobody.
  struct WholeState {
    std::shared_ptr<RequestChannel> channel;
    CompletionIds ids;
    std::vector<std::string> texts, reasons;
    std::vector<std::vector<TokenLogprobText>> logprobs;
    bool finished = false;
    void take(std::vector<ChoiceDelta>& deltas) {
      for (ChoiceDelta& d : deltas) {
        if (d.index >= texts.size()) continue;
        texts[d.index] += d.text;
        for (TokenLogprobText& t : d.logprobs) logprobs[d.index].push_back(std::move(t));
        if (d.finish_reason) reasons[d.index] = d.finish_reason;
      }
      deltas.clear();
    }
  };

  void respond_whole(httplib::Response& res, const RequestLogContext& lc,
                     std::shared_ptr<RequestChannel> ch, const CompletionIds& ids, uint32_t n) {
    const std::string& route = lc.route;
    auto st = std::make_shared<WholeState>();
    st->channel = std::move(ch);
    st->ids = ids;
    st->texts.assign(n, "");
    st->reasons.assign(n, "stop");
    st->logprobs.assign(n, {});
    std::vector<ChoiceDelta> deltas;
    bool done = false;
    while (!done && deltas.empty()) done = st->channel->wait(&deltas, std::chrono::seconds(1));
    st->take(deltas);
    if (done) {
      const Status err = st->channel->error();
      if (!err.is_ok()) {
        const ApiError e = api_error_of(err);
        reply_error(res, route, e);
        log_request(lc, e.status, st->channel.get(), outcome_of(e));
        return;
      }
      reply_json(
          res, route,
          completion_json(st->ids, st->texts, st->reasons, st->logprobs, st->channel->usage()));
      log_request(lc, 200, st->channel.get(), "ok");
      return;
    }
    metrics.count_http(route, 200);
    res.set_chunked_content_provider(
        "application/json",
        [st](size_t, httplib::DataSink& sink) {
          std::vector<ChoiceDelta> more;
          const bool finished = st->channel->wait(&more, std::chrono::milliseconds(250));
          st->take(more);
          if (!finished) return sink.write(" ", 1);
          st->finished = true;
          const Status err = st->channel->error();
          const std::string body =
              err.is_ok() ? json_text(completion_json(st->ids, st->texts, st->reasons, st->logprobs,
                                                      st->channel->usage()))
                          : json_text(error_body(api_error_of(err)));
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        [this, st, lc](bool) {
          // The status line (200) was sent at the first event; the outcome says how it ended.
          if (!st->finished) worker.cancel(st->channel);
          const Status err = st->channel->error();
          log_request(lc, 200, st->channel.get(),
                      !st->finished ? "client_gone"
                      : err.is_ok() ? "ok"
                                    : outcome_of(api_error_of(err)));
        });
  }

  struct StreamState {
    std::shared_ptr<RequestChannel> channel;
    CompletionIds ids;
    bool include_usage = false;
    std::vector<bool> role_sent;
    bool finished = false;
    Clock::time_point last_write = Clock::now();
  };

  void stream(httplib::Response& res, const RequestLogContext& lc,
              std::shared_ptr<RequestChannel> ch, const CompletionIds& ids, bool include_usage,
              uint32_t n) {
    const std::string& route = lc.route;
    auto st = std::make_shared<StreamState>();
    st->channel = std::move(ch);
    st->ids = ids;
    st->include_usage = include_usage;
    st->role_sent.assign(n, false);
    metrics.count_http(route, 200);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            st->last_write = Clock::now();
            return sink.write(s.data(), s.size());
          };
          std::vector<ChoiceDelta> deltas;
          const bool done = st->channel->wait(&deltas, std::chrono::milliseconds(250));
          for (const ChoiceDelta& d : deltas) {
            const bool first = d.index < st->role_sent.size() && !st->role_sent[d.index];
            if (first) st->role_sent[d.index] = true;
            if (!write("data: " + json_text(chunk_json(st->ids, d, first, st->include_usage)) +
                       "\n\n"))
              return false;
          }
          if (!done) {
            // A comment line now and then: a client that went away makes the write fail.
            if (deltas.empty() && Clock::now() - st->last_write > std::chrono::milliseconds(500))
              return write(": keep-alive\n\n");
            return true;
          }
          st->finished = true;
          const Status err = st->channel->error();
          if (!err.is_ok()) {
            write("data: " + json_text(error_body(api_error_of(err))) + "\n\n");
          } else if (st->include_usage) {
            if (!write("data: " + json_text(usage_chunk_json(st->ids, st->channel->usage())) +
                       "\n\n"))
              return false;
          }
          write("data: [DONE]\n\n");
          sink.done();
          return true;
        },
        [this, st, lc](bool) {
          // The client went away (or the write failed) before the end: abort the request.
          if (!st->finished) worker.cancel(st->channel);
          const Status err = st->channel->error();
          log_request(lc, 200, st->channel.get(),
                      !st->finished ? "client_gone"
                      : err.is_ok() ? "ok"
                                    : outcome_of(api_error_of(err)));
        });
  }

  // /metrics of a view as `scope` may see it: the engine's counters, and the tenant series
  // the scoped view has (its own, and everyone else as "other").
  MetricsSnapshot snapshot(const KvView& full, const ViewScope& scope) {
    const KvView scoped = scoped_kv_view(full, scope);
    MetricsSnapshot s{.engine = scoped.engine};
    std::vector<TenantSeries> tenants;
    for (const TenantStats& t : scoped.tenants)
      tenants.push_back({.label = labeler.label(t.cache_salt),
                         .query_tokens = t.prefix_query_tokens,
                         .hit_tokens = t.prefix_hit_block_tokens,
                         .blocks_held = t.blocks_held});
    s.tenants = cap_tenant_series(std::move(tenants), config.max_tenant_metrics);
    if (config.kv_events != nullptr) s.kv_events = config.kv_events->stats();
    s.kv_views_taken = views.views_taken();
    return s;
  }

  void routes() {
    http.Post(kCompletionsRoute, [this](const httplib::Request& req, httplib::Response& res) {
      handle_generate(req, res, false);
    });
    http.Post(kChatRoute, [this](const httplib::Request& req, httplib::Response& res) {
      handle_generate(req, res, true);
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authenticate(req, res, "/v1/models")) return;
      json m = {{"id", config.served_model_name},
                {"object", "model"},
                {"created", unix_now()},
                {"owned_by", "kvserve"},
                {"max_model_len", engine.max_model_len()}};
      reply_json(res, "/v1/models", {{"object", "list"}, {"data", json::array({m})}});
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining.load()) {
        res.status = 503;
        res.set_header("Retry-After", "5");
        res.set_content(json_text({{"status", "draining"}}), "application/json");
        metrics.count_http("/health", 503);
        return;
      }
      reply_json(res, "/health", {{"status", "ok"}});
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      // Without a key (--public-metrics) the tenant series are one anonymous "other".
      ViewScope scope{.tenant = "\x1f", .admin = false};
      const bool presented = !req.get_header_value("Authorization").empty();
      if (!config.public_metrics || presented || !config.api_keys.enabled()) {
        const std::optional<Caller> c = authenticate(req, res, "/metrics");
        if (!c) return;
        scope = {.tenant = c->tenant, .admin = c->admin};
      }
      const std::shared_ptr<const KvView> view = views.get();
      if (!view) {
        reply_error(res, "/metrics", {.status = 503, .message = "the server is stopping"});
        return;
      }
      metrics.count_http("/metrics", 200);
      res.set_content(metrics.render(snapshot(*view, scope)),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/v1/kv", [this](const httplib::Request& req, httplib::Response& res) {
      const std::optional<Caller> c = authenticate(req, res, "/v1/kv");
      if (!c) return;
      const std::shared_ptr<const KvView> view = views.get();
      if (!view) {
        reply_error(res, "/v1/kv", {.status = 503, .message = "the server is stopping"});
        return;
      }
      // One body per (view, scope): pollers of the same view share it instead of each
      // building the JSON of every block again.
      const std::string scope_key = c->admin ? std::string("\x01") : c->tenant;
      std::shared_ptr<const std::string> body;
      {
        std::lock_guard lock(kv_bodies_mu);
        for (const KvBody& b : kv_bodies)
          if (b.view == view && b.scope == scope_key) body = b.text;
      }
      if (!body) {
        const ViewScope scope{.tenant = c->tenant, .admin = c->admin};
        body = std::make_shared<const std::string>(
            json_text(kv_view_json(c->admin ? *view : scoped_kv_view(*view, scope),
                                   engine.kv_pool().groups, labeler, c->admin)));
        std::lock_guard lock(kv_bodies_mu);
        std::erase_if(kv_bodies, [&](const KvBody& b) { return b.view != view; });
        if (kv_bodies.size() < 16) kv_bodies.push_back({view, scope_key, body});
      }
      res.status = 200;
      res.set_content(*body, "application/json");
      metrics.count_http("/v1/kv", 200);
    });
    http.Get("/debug/integrity", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authenticate(req, res, "/debug/integrity")) return;
      Status st = internal_error("the engine is stopping");
      uint32_t sequences = 0;
      {
        // At most one check per second on the engine thread, whoever polls.
        std::lock_guard lock(integrity_mu);
        const auto now = std::chrono::steady_clock::now();
        if (now - integrity_at >= std::chrono::seconds(1) || !integrity_status.is_ok()) {
          Status fresh = internal_error("the engine is stopping");
          worker.run_on_engine([&](Engine& e) {
            fresh = e.check_integrity();
            integrity_sequences = e.snapshot().cache.num_sequences;
          });
          integrity_status = fresh;
          integrity_at = now;
        }
        st = integrity_status;
        sequences = integrity_sequences;
      }
      if (!st.is_ok()) {
        reply_error(res, "/debug/integrity",
                    {.status = 500, .message = st.to_string(), .type = "internal_error"});
        return;
      }
      reply_json(res, "/debug/integrity", {{"ok", true}, {"sequences", sequences}});
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
      res.set_content(json_text(error_body(e)), "application/json");
    });
    http.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& ex) {
            what = ex.what();
          } catch (...) {
          }
          reply_error(res, req.path, {.status = 500, .message = what, .type = "internal_error"});
        });
    dashboard.install(http);
  }
};

OpenAiServer::OpenAiServer(Engine& engine, const LoadedModel& model, ServerConfig config)
    : impl_(std::make_unique<Impl>(engine, model, std::move(config))) {
  Impl& s = *impl_;
  // One handler thread per in-flight request (a stream holds its thread) plus spares for
  // /metrics, /health and fast 429 answers.
  const size_t threads = s.engine.config().max_num_seqs + s.config.max_queued_requests + 16;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.http.set_payload_max_length(s.config.max_body_bytes);
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
  impl_->dashboard.stop();
  impl_->worker.stop();
}

void OpenAiServer::stop() {
  if (impl_) impl_->http.stop();
}

void OpenAiServer::begin_draining() { impl_->draining.store(true); }

bool OpenAiServer::drained() const { return impl_->open_requests.load() == 0; }

}  // namespace kvs
