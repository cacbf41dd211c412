#include "server/dashboard_stats.h"

namespace kvs {

namespace {

nlohmann::json quantile_or_null(const Histogram& h, double q) {
  const std::optional<double> v = h.quantile(q);
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json latency_json(const Histogram& h) {
  return {
      {"count", h.count()}, {"p50", quantile_or_null(h, 0.5)}, {"p99", quantile_or_null(h, 0.99)}};
}

}  // namespace

nlohmann::json dashboard_stats_json(const MetricsSummary& m,
                                    const std::vector<TenantSeries>& tenants) {
  nlohmann::json ttft = nlohmann::json::array();
  for (int i = 0; i < static_cast<int>(m.ttft.size()); ++i) {
    nlohmann::json b = latency_json(m.ttft[i]);
    b["bucket"] = ServerMetrics::prompt_bucket_name(i);
    ttft.push_back(std::move(b));
  }
  nlohmann::json routes = nlohmann::json::array();
  for (const MetricsSummary::Route& r : m.routes)
    routes.push_back({{"route", r.route}, {"query", r.query_tokens}, {"hit", r.hit_tokens}});
  nlohmann::json tenant_list = nlohmann::json::array();
  for (const TenantSeries& t : tenants)
    tenant_list.push_back({{"label", t.label},
                           {"query", t.query_tokens},
                           {"hit", t.hit_tokens},
                           {"blocks", t.blocks_held}});
  return {{"quantiles", "bucket-interpolated"},
          {"ttft", std::move(ttft)},
          {"itl", latency_json(m.itl)},
          {"length_fraction",
           {{"bounds", m.length_fraction.bounds()},
            {"counts", m.length_fraction.counts()},
            {"count", m.length_fraction.count()}}},
          {"routes", std::move(routes)},
          {"tenants", std::move(tenant_list)}};
}

}  // namespace kvs
