// DashboardRoutes: the live view of the KV cache.
//
//   GET /dashboard             the page (index.html); static, embedded, needs no key: it holds
//                              no data. It asks for an API key when the server has keys and
//                              sends it only as an Authorization header, never in a URL.
//   GET /dashboard/NAME        its CSS and JavaScript modules
//   GET /dashboard/auth.json   {"key_required": bool}, so the page asks for a key up front
//   GET /v1/kv/stream          server-sent events, one frame per tick (kv_frame.h): a key frame,
//                              then only what changed. Needs a key when keys are set (read with
//                              fetch() + ReadableStream: EventSource cannot send headers). A
//                              tenant's stream shows its own requests and everyone else's blocks
//                              as "other" (kv_view.h); an admin's shows everything. At most
//                              max_dashboards streams at once, beyond that 429.
//
// The page's files are served with a strict Content-Security-Policy (same origin only, no
// inline script), so it cannot load anything from the network even by mistake.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/engine_worker.h"
#include "server/kv_stream.h"
#include "server/kv_view_cache.h"
#include "server/metrics.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvs {

struct DashboardDeps {
  // Read here only for what never changes (config, pool plan, max model len); engine state
  // comes from `views` (taken on the engine thread at most once per its interval).
  const Engine& engine;
  KvViewCache& views;
  ServerMetrics& metrics;
  const TenantLabeler& labeler;
  std::string served_model_name;
  size_t max_tenant_series = 100;
  uint32_t max_dashboards = 4;
  std::chrono::milliseconds interval{100};
  bool key_required = false;  // API keys are set
  // The caller's view scope; answers 401 itself and returns nullopt when the request needs a key
  // and has no valid one.
  std::function<std::optional<ViewScope>(const httplib::Request&, httplib::Response&,
                                         const std::string& route)>
      authorize;
};

class DashboardRoutes {
 public:
  explicit DashboardRoutes(DashboardDeps deps);
  ~DashboardRoutes();
  DashboardRoutes(const DashboardRoutes&) = delete;
  DashboardRoutes& operator=(const DashboardRoutes&) = delete;

  void install(httplib::Server& http);
  // Ends every stream (call before the engine worker stops). Idempotent.
  void stop();

 private:
  void serve_asset(const std::string& name, httplib::Response& res);
  void stream(const httplib::Request& req, httplib::Response& res);

  DashboardDeps deps_;
  std::unique_ptr<KvStreamHub> hub_;
};

}  // namespace kvs
