// The Prometheus rendering of ServerMetrics: cumulative buckets, _total counters, labels, and
// tenant labels that never reveal the salt.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace kvs {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(ServerMetrics, HistogramBucketsAreCumulative) {
  Histogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.observe(v);
  std::string out;
  h.render("x_seconds", "route=\"/a\"", &out);
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{route=\"/a\",le=\"1\"} 2")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{route=\"/a\",le=\"2\"} 3")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{route=\"/a\",le=\"5\"} 4")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_bucket{route=\"/a\",le=\"+Inf\"} 5")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_sum{route=\"/a\"} 16")) << out;
  EXPECT_TRUE(has_line(out, "x_seconds_count{route=\"/a\"} 5")) << out;
}

TEST(ServerMetrics, TenantLabelsAreKeyedNeverTheSalt) {
  const TenantLabeler labeler;
  const std::string a = labeler.label("customer-a-secret");
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a.find("customer"), std::string::npos);
  EXPECT_EQ(a, labeler.label("customer-a-secret"));
  EXPECT_NE(a, labeler.label("customer-b-secret"));
  EXPECT_EQ(labeler.label(""), "none");
  // Another process (another key) labels the same salt differently: no offline dictionary.
  EXPECT_NE(a, TenantLabeler().label("customer-a-secret"));
  // Tenants from API keys are named; their salts are keyed hashes under the name.
  EXPECT_EQ(labeler.label("alice\x1f"), "alice");
  const std::string sub = labeler.label("alice\x1fproject");
  EXPECT_TRUE(sub.starts_with("alice/"));
  EXPECT_EQ(sub.size(), 6u + 12u);
}

TEST(ServerMetrics, TenantSeriesAreCappedWithTheRestAsOther) {
  std::vector<TenantSeries> t;
  for (int i = 0; i < 5; ++i)
    t.push_back({.label = "t" + std::to_string(i),
                 .query_tokens = 100u + i,
                 .hit_tokens = 10,
                 .blocks_held = static_cast<uint64_t>(i)});
  const auto capped = cap_tenant_series(t, 2);
  ASSERT_EQ(capped.size(), 3u);
  EXPECT_EQ(capped[0].label, "t4");
  EXPECT_EQ(capped[1].label, "t3");
  EXPECT_EQ(capped[2].label, "other");
  EXPECT_EQ(capped[2].query_tokens, 100u + 101u + 102u);
  EXPECT_EQ(capped[2].hit_tokens, 30u);
  EXPECT_EQ(capped[2].blocks_held, 0u + 1u + 2u);
  EXPECT_EQ(cap_tenant_series(t, 5).size(), 5u);
}

TEST(ServerMetrics, RendersObservationsWithBaseUnitsAndTotals) {
  ServerMetrics m;
  m.observe_ttft(0.2, 50);
  m.observe_ttft(3.0, 1000);
  m.observe_inter_token(0.01);
  m.observe_finished("/v1/completions", 1.5, 50, 32, 7, {0.25}, "length");
  m.count_http("/v1/completions", 200);
  MetricsSnapshot snap;
  snap.engine.cache.num_blocks = 10;
  snap.engine.cache.blocks_free = 6;
  snap.engine.cache.blocks_cached_free = 3;
  snap.engine.cache.blocks_in_use = 1;
  snap.engine.preemptions_swap = 2;
  snap.engine.attention_sink_refused_hits = 4;
  snap.tenants.push_back({.label = "t", .query_tokens = 50, .hit_tokens = 32});
  const std::string text = m.render(snap);
  EXPECT_TRUE(has_line(text, "kvserve_prompt_tokens_total 50"));
  EXPECT_TRUE(has_line(text, "kvserve_generation_tokens_total 7"));
  EXPECT_TRUE(has_line(text, "kvserve_kv_blocks{state=\"cached_free\"} 3"));
  EXPECT_TRUE(has_line(text, "kvserve_preemptions_total{mode=\"swap\"} 2"));
  EXPECT_TRUE(has_line(text, "kvserve_preemptions_total{mode=\"recompute\"} 0"));
  EXPECT_TRUE(has_line(text, "kvserve_attention_sink_refused_hits_total 4"));
  EXPECT_TRUE(
      has_line(text, "kvserve_route_prefix_cache_hits_tokens_total{route=\"/v1/completions\"} 32"));
  EXPECT_TRUE(
      has_line(text, "kvserve_time_to_first_token_seconds_count{prompt_tokens=\"512-2047\"} 1"));
  EXPECT_TRUE(
      has_line(text, "kvserve_time_to_first_token_seconds_count{prompt_tokens=\"1-127\"} 1"));
  EXPECT_TRUE(has_line(text, "kvserve_request_finished_total{finish_reason=\"length\"} 1"));
  EXPECT_TRUE(
      has_line(text, "kvserve_http_requests_total{route=\"/v1/completions\",status=\"200\"} 1"));
  // Every counter's name ends in _total.
  size_t pos = 0;
  while ((pos = text.find("# TYPE ", pos)) != std::string::npos) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    if (line.ends_with(" counter")) {
      const std::string name = line.substr(7, line.size() - 7 - 8);
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
    EXPECT_EQ(line.find("kvserve_"), 7u) << line;
    pos = end;
  }
}

}  // namespace
}  // namespace kvs
