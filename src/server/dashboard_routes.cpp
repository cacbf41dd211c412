#include "server/dashboard_routes.h"

#include <httplib.h>

#include "core/byte_size.h"
#include "server/capacity_line.h"
#include "server/dashboard_assets.h"
#include "server/dashboard_stats.h"
#include "server/response_json.h"

namespace kvs {

namespace {

constexpr const char* kStreamRoute = "/v1/kv/stream";
constexpr const char* kPageRoute = "/dashboard";

// Same origin only, no inline script or style, no framing: the page cannot reach the network.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The tiers under the pool, as the page names them ("lower tiers: host memory 1.00 GiB, ...").
nlohmann::json lower_tiers(const KvOffloadConfig& o) {
  nlohmann::json out = nlohmann::json::array();
  if (o.host_bytes > 0) out.push_back("host memory " + format_bytes_binary(o.host_bytes));
  if (!o.disk_dir.empty()) out.push_back("disk " + format_bytes_binary(o.disk_bytes));
  if (!o.remote_urls.empty())
    out.push_back("Redis x" + std::to_string(o.remote_urls.size()));  // never the URLs
  return out;
}

std::string config_fields(const DashboardDeps& d) {
  const Engine& e = d.engine;
  const CapacityLine cap =
      capacity_line(e.kv_pool(), e.config().kv_cache_memory,
                    std::max<uint32_t>(1, e.max_model_len()), e.config().max_num_batched_tokens);
  const nlohmann::json config = {
      {"model", d.served_model_name},
      {"num_blocks", e.kv_pool().num_blocks},
      {"block_size", e.kv_pool().block_size},
      {"block_bytes", e.kv_pool().block_bytes},
      {"max_model_len", e.max_model_len()},
      {"max_num_seqs", e.config().max_num_seqs},
      {"preemption_mode", preemption_mode_name(e.config().preemption_mode)},
      {"prefix_caching", e.config().enable_prefix_caching},
      {"interval_ms", d.interval.count()},
      {"layer_groups", layer_groups_json(e.kv_pool().groups)},
      {"lower_tiers", lower_tiers(e.config().offload)},
      {"capacity", capacity_json(cap)}};
  return "\"config\":" + json_text(config);
}

}  // namespace

DashboardRoutes::DashboardRoutes(DashboardDeps deps) : deps_(std::move(deps)) {
  KvStreamSource source{
      .take_view = [this] { return deps_.views.get(); },
      .metrics_fields =
          [this](const KvView& view) {
            std::vector<TenantSeries> tenants;
            for (const TenantStats& t : view.tenants)
              tenants.push_back({.label = deps_.labeler.label(t.cache_salt),
                                 .query_tokens = t.prefix_query_tokens,
                                 .hit_tokens = t.prefix_hit_block_tokens,
                                 .blocks_held = t.blocks_held});
            tenants = cap_tenant_series(std::move(tenants), deps_.max_tenant_series);
            return "\"metrics\":" +
                   json_text(dashboard_stats_json(deps_.metrics.summary(), tenants));
          },
      .config_fields = config_fields(deps_)};
  hub_ = std::make_unique<KvStreamHub>(
      deps_.labeler, std::move(source),
      KvStreamConfig{.interval = deps_.interval, .max_subscribers = deps_.max_dashboards});
}

DashboardRoutes::~DashboardRoutes() { stop(); }

void DashboardRoutes::stop() { hub_->stop(); }

void DashboardRoutes::install(httplib::Server& http) {
  http.Get(kPageRoute, [this](const httplib::Request&, httplib::Response& res) {
    serve_asset("index.html", res);
  });
  // Whether the stream needs a key (so the page asks before it tries, instead of provoking a 401).
  // It tells nothing a 401 from any route would not.
  http.Get("/dashboard/auth.json", [this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_header("Cache-Control", "no-store");
    res.set_content(json_text({{"key_required", deps_.key_required}}), "application/json");
    deps_.metrics.count_http(kPageRoute, 200);
  });
  http.Get(R"(/dashboard/([A-Za-z0-9_.-]{1,64}))",
           [this](const httplib::Request& req, httplib::Response& res) {
             serve_asset(req.matches[1].str(), res);
           });
  http.Get(kStreamRoute,
           [this](const httplib::Request& req, httplib::Response& res) { stream(req, res); });
}

void DashboardRoutes::serve_asset(const std::string& name, httplib::Response& res) {
  for (const DashboardAsset& a : dashboard_assets()) {
    if (a.name != name) continue;
    res.status = 200;
    res.set_header("Content-Security-Policy", kContentSecurityPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-cache");
    res.set_content(a.body.data(), a.body.size(), std::string(a.content_type).c_str());
    deps_.metrics.count_http(kPageRoute, 200);
    return;
  }
  res.status = 404;
  res.set_content(
      json_text(error_body({.status = 404, .message = "no such file", .code = "not_found"})),
      "application/json");
  deps_.metrics.count_http(kPageRoute, 404);
}

void DashboardRoutes::stream(const httplib::Request& req, httplib::Response& res) {
  const std::optional<ViewScope> scope = deps_.authorize(req, res, kStreamRoute);
  if (!scope) return;
  std::shared_ptr<KvSubscription> sub = hub_->subscribe(*scope);
  if (!sub) {
    const ApiError e{.status = 429,
                     .message = "too many dashboards are open (at most " +
                                std::to_string(deps_.max_dashboards) + "); close one",
                     .type = "rate_limit_error",
                     .code = "rate_limit_exceeded"};
    res.status = 429;
    res.set_header("Retry-After", "5");
    res.set_content(json_text(error_body(e)), "application/json");
    deps_.metrics.count_http(kStreamRoute, 429);
    return;
  }
  deps_.metrics.count_http(kStreamRoute, 200);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto last_write =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  res.set_chunked_content_provider(
      "text/event-stream",
      [sub, last_write](size_t, httplib::DataSink& sink) {
        std::vector<std::shared_ptr<const std::string>> frames;
        const bool open = sub->wait(&frames, std::chrono::milliseconds(250));
        for (const auto& f : frames) {
          if (!sink.write(f->data(), f->size())) return false;
          *last_write = std::chrono::steady_clock::now();
        }
        if (!open) {
          sink.done();
          return true;
        }
        // A comment now and then: a page that went away makes the write fail.
        if (frames.empty() &&
            std::chrono::steady_clock::now() - *last_write > std::chrono::seconds(1)) {
          static constexpr char kKeepAlive[] = ": keep-alive\n\n";
          *last_write = std::chrono::steady_clock::now();
          return sink.write(kKeepAlive, sizeof kKeepAlive - 1);
        }
        return true;
      },
      [this, sub](bool) { hub_->unsubscribe(sub); });
}

}  // namespace kvs
