// dashboard_stats: the chart data of the dashboard, sent in the KV stream now and then as
// "metrics": TTFT p50/p99 per prompt-length bucket, inter-token latency p50/p99, the histogram of
// tokens per sample over --max-model-len, and prefix-cache queries and hits (whole blocks) per
// route and per tenant. Quantiles are interpolated inside histogram buckets (Histogram::quantile,
// as Prometheus' histogram_quantile), so they are only as exact as the buckets; the JSON says so.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "server/metrics.h"

namespace kvs {

[[nodiscard]] nlohmann::json dashboard_stats_json(const MetricsSummary& summary,
                                                  const std::vector<TenantSeries>& tenants);

}  // namespace kvs
