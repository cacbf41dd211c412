#include "server/metrics.h"

#include "server/kv_view.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <concepts>
#include <cstdio>

namespace kvs {

namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

template <std::integral T>
std::string num(T v) {
  return std::to_string(v);
}

void header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string* out, const std::string& name, const std::string& labels,
            const std::string& value) {
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += " " + value + "\n";
}

template <typename T>
void metric(std::string* out, const std::string& name, const char* type, const char* help,
            T value) {
  header(out, name, type, help);
  sample(out, name, "", num(value));
}

std::string escape_label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

// The KV offload tiers' series, labelled tier="host" / "disk" / "remote" (only tiers that are on).
void render_offload(const KvOffloadStats& k, std::string* o) {
  std::vector<std::pair<const char*, const TierStats*>> tiers;
  if (k.host_enabled) tiers.push_back({"host", &k.host});
  if (k.disk_enabled) tiers.push_back({"disk", &k.disk});
  if (k.remote_enabled) tiers.push_back({"remote", &k.remote});
  const auto series = [&](const char* name, const char* type, const char* help, auto field) {
    header(o, name, type, help);
    for (const auto& [tier, t] : tiers)
      sample(o, name, std::string("tier=\"") + tier + "\"", num(field(*t)));
  };
  series("kvserve_kv_offload_usage_bytes", "gauge", "Bytes of KV blocks held by the tier.",
         [](const TierStats& t) { return t.used_bytes; });
  series("kvserve_kv_offload_capacity_bytes", "gauge", "Capacity of the tier in bytes.",
         [](const TierStats& t) { return t.capacity_bytes; });
  series("kvserve_kv_offload_blocks", "gauge", "KV blocks held by the tier.",
         [](const TierStats& t) { return t.blocks; });
  series("kvserve_kv_offload_blocks_stored_total", "counter", "KV blocks written to the tier.",
         [](const TierStats& t) { return t.blocks_stored; });
  series("kvserve_kv_offload_blocks_loaded_total", "counter",
         "KV blocks loaded from the tier into the pool.",
         [](const TierStats& t) { return t.blocks_loaded; });
  series("kvserve_kv_offload_blocks_evicted_total", "counter",
         "KV blocks the tier dropped for room (the host tier's go to disk when admitted).",
         [](const TierStats& t) { return t.blocks_evicted; });
  series("kvserve_kv_offload_prefix_cache_hits_tokens_total", "counter",
         "Prompt tokens served from the tier.", [](const TierStats& t) { return t.hit_tokens; });
  series("kvserve_kv_offload_checksum_failures_total", "counter",
         "Extents dropped because a checksum, header or token check failed (recomputed).",
         [](const TierStats& t) { return t.checksum_failures; });
  series("kvserve_kv_offload_errors_total", "counter", "I/O errors of the tier.",
         [](const TierStats& t) { return t.errors; });
  series("kvserve_kv_offload_load_bandwidth_bytes_per_second", "gauge",
         "Measured load bandwidth (startup, then online), used to choose load or recompute.",
         [](const TierStats& t) { return t.load_bytes_per_s; });
  header(o, "kvserve_kv_offload_decisions_total", "counter",
         "Runs of tier hits loaded, or recomputed because loading was predicted slower.");
  for (const auto& [tier, t] : tiers) {
    sample(o, "kvserve_kv_offload_decisions_total",
           std::string("tier=\"") + tier + "\",decision=\"load\"", num(t->load_decisions));
    sample(o, "kvserve_kv_offload_decisions_total",
           std::string("tier=\"") + tier + "\",decision=\"recompute\"",
           num(t->recompute_decisions));
  }
  header(o, "kvserve_kv_offload_load_seconds", "histogram", "Time to load one block.");
  for (const auto& [tier, t] : tiers) {
    const std::string l = std::string("tier=\"") + tier + "\"";
    uint64_t cum = 0;
    for (size_t i = 0; i <= kTierLoadBuckets.size(); ++i) {
      cum += t->load_buckets[i];
      const std::string le =
          i < kTierLoadBuckets.size() ? num(kTierLoadBuckets[i]) : std::string("+Inf");
      sample(o, "kvserve_kv_offload_load_seconds_bucket", l + ",le=\"" + le + "\"", num(cum));
    }
    sample(o, "kvserve_kv_offload_load_seconds_sum", l, num(t->load_seconds_sum));
    sample(o, "kvserve_kv_offload_load_seconds_count", l, num(t->load_count));
  }
  if (k.disk_enabled) {
    metric(o, "kvserve_kv_offload_foreign_extents", "gauge",
           "Disk extents of another model, KV format, block size or server secret: ignored, "
           "never loaded.",
           k.disk_foreign_extents);
    metric(o, "kvserve_kv_offload_disk_skipped_entries", "gauge",
           "Entries of the disk tier's directory never read: links, FIFOs, devices, unreadable "
           "files.",
           k.disk_skipped_entries);
    metric(o, "kvserve_kv_offload_disk_admitting", "gauge",
           "1 while the disk tier admits blocks (0 after a write error).",
           static_cast<uint64_t>(k.disk_admitting ? 1 : 0));
  }
  if (k.remote_enabled) {
    metric(o, "kvserve_kv_offload_remote_dropped_writes_total", "counter",
           "Blocks not written to Redis: write queue full, breaker open, or a failed SET.",
           k.remote_dropped_writes);
    metric(o, "kvserve_kv_offload_remote_queued_writes", "gauge",
           "Blocks not in Redis yet: queued for the writer or being written.",
           k.remote_queued_writes);
    metric(o, "kvserve_kv_offload_remote_bytes_written_total", "counter",
           "Bytes of values Redis acknowledged.", k.remote_bytes_written);
    metric(o, "kvserve_kv_offload_remote_bytes_read_total", "counter",
           "Bytes of values read from Redis.", k.remote_bytes_read);
    header(o, "kvserve_kv_offload_remote_breaker_state", "gauge",
           "Circuit breaker of each Redis instance: 0 closed, 1 open, 2 half-open (probing).");
    for (const RemoteInstanceState& r : k.remote_instances)
      sample(o, "kvserve_kv_offload_remote_breaker_state", "instance=\"" + r.url + "\"",
             num(static_cast<uint64_t>(r.breaker)));
    header(o, "kvserve_kv_offload_remote_breaker_opened_total", "counter",
           "Times each Redis instance's breaker opened.");
    for (const RemoteInstanceState& r : k.remote_instances)
      sample(o, "kvserve_kv_offload_remote_breaker_opened_total", "instance=\"" + r.url + "\"",
             num(r.times_opened));
  }
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string* out) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
    sample(out, name + "_bucket", labels + sep + "le=\"" + num(le) + "\"", num(cum));
  }
  sample(out, name + "_sum", labels, num(sum_));
  sample(out, name + "_count", labels, num(count_));
}

std::optional<double> Histogram::quantile(double q) const {
  if (count_ == 0) return std::nullopt;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(count_);
  uint64_t below = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    const uint64_t in_bucket = counts_[i];
    if (in_bucket > 0 && static_cast<double>(below + in_bucket) >= rank) {
      if (i == bounds_.size()) return bounds_.empty() ? 0.0 : bounds_.back();
      const double lo = i == 0 ? 0.0 : bounds_[i - 1], hi = bounds_[i];
      const double within = (rank - static_cast<double>(below)) / static_cast<double>(in_bucket);
      return lo + (hi - lo) * std::clamp(within, 0.0, 1.0);
    }
    below += in_bucket;
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

std::string TenantLabeler::label(std::string_view ns) const {
  if (ns == kOtherTenantsNamespace) return "other";
  const auto hex12 = [&](std::string_view salt) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, siphash24(key_, salt));
    return std::string(buf, 12);
  };
  const size_t sep = ns.find('\x1f');
  if (sep == std::string_view::npos) return ns.empty() ? "none" : hex12(ns);
  const std::string_view tenant = ns.substr(0, sep), salt = ns.substr(sep + 1);
  if (tenant.empty()) return salt.empty() ? "none" : hex12(salt);  // the anonymous tenant
  return salt.empty() ? std::string(tenant) : std::string(tenant) + "/" + hex12(salt);
}

std::vector<TenantSeries> cap_tenant_series(std::vector<TenantSeries> tenants, size_t max_named) {
  if (tenants.size() <= max_named) return tenants;
  std::sort(tenants.begin(), tenants.end(), [](const auto& a, const auto& b) {
    if (a.blocks_held != b.blocks_held) return a.blocks_held > b.blocks_held;
    if (a.query_tokens != b.query_tokens) return a.query_tokens > b.query_tokens;
    return a.label < b.label;
  });
  TenantSeries other{.label = "other"};
  for (size_t i = max_named; i < tenants.size(); ++i) {
    other.query_tokens += tenants[i].query_tokens;
    other.hit_tokens += tenants[i].hit_tokens;
    other.blocks_held += tenants[i].blocks_held;
  }
  tenants.resize(max_named);
  tenants.push_back(std::move(other));
  return tenants;
}

namespace {
const std::vector<double> kTtftBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                         2.5,  5,     10,   20,  40,   80};
const char* const kPromptBucketNames[] = {"1-127", "128-511", "512-2047", "2048+"};
}  // namespace

ServerMetrics::ServerMetrics()
    : ttft_{Histogram(kTtftBounds), Histogram(kTtftBounds), Histogram(kTtftBounds),
            Histogram(kTtftBounds)},
      itl_({0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}),
      e2e_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}),
      length_fraction_({0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1}) {}

const char* ServerMetrics::prompt_bucket(uint32_t n) {
  return kPromptBucketNames[n < 128 ? 0 : n < 512 ? 1 : n < 2048 ? 2 : 3];
}

const char* ServerMetrics::prompt_bucket_name(int i) { return kPromptBucketNames[i]; }

MetricsSummary ServerMetrics::summary() const {
  std::lock_guard lock(mu_);
  MetricsSummary s{.ttft = std::vector<Histogram>(ttft_.begin(), ttft_.end()),
                   .itl = itl_,
                   .length_fraction = length_fraction_};
  for (const auto& [route, r] : routes_)
    s.routes.push_back(
        {.route = route, .query_tokens = r.query_tokens, .hit_tokens = r.hit_tokens});
  return s;
}

void ServerMetrics::observe_ttft(double seconds, uint32_t prompt_tokens) {
  std::lock_guard lock(mu_);
  const uint32_t n = prompt_tokens;
  ttft_[n < 128 ? 0 : n < 512 ? 1 : n < 2048 ? 2 : 3].observe(seconds);
}

void ServerMetrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

void ServerMetrics::observe_finished(const std::string& route, double e2e, uint32_t prompt,
                                     uint32_t cached, uint32_t generated,
                                     const std::vector<double>& fractions,
                                     const std::string& reason) {
  std::lock_guard lock(mu_);
  e2e_.observe(e2e);
  prompt_tokens_ += prompt;
  generation_tokens_ += generated;
  RouteCounters& r = routes_[route];
  r.query_tokens += prompt;
  r.hit_tokens += cached;
  for (double f : fractions) length_fraction_.observe(f);
  ++finished_[reason];
}

void ServerMetrics::count_http(const std::string& route, int status) {
  std::lock_guard lock(mu_);
  ++http_[{route, status}];
}

std::string ServerMetrics::render(const MetricsSnapshot& snap) const {
  const EngineSnapshot& s = snap.engine;
  std::lock_guard lock(mu_);
  std::string o;
  o.reserve(16384);
  metric(&o, "kvserve_num_requests_running", "gauge", "Sequences running in the engine.",
         s.running);
  metric(&o, "kvserve_num_requests_waiting", "gauge",
         "Sequences waiting for admission (including swapped ones).", s.waiting);
  metric(&o, "kvserve_num_requests_swapped", "gauge",
         "Sequences waiting with their KV in the host swap area.", s.swapped);
  metric(&o, "kvserve_num_requests_loading", "gauge",
         "Sequences waiting while their cached prefix is read from the disk or remote KV tier.",
         s.loading);
  metric(&o, "kvserve_engine_steps_total", "counter", "Engine steps (forward passes) run.",
         s.steps);
  metric(&o, "kvserve_kv_cache_usage_ratio", "gauge",
         "Fraction of KV blocks in use by sequences (0..1).",
         static_cast<double>(s.cache.blocks_in_use) / std::max<uint32_t>(1, s.cache.num_blocks));
  header(&o, "kvserve_kv_blocks", "gauge", "KV blocks by state.");
  sample(&o, "kvserve_kv_blocks", "state=\"free\"", num(s.cache.blocks_free));
  sample(&o, "kvserve_kv_blocks", "state=\"cached_free\"", num(s.cache.blocks_cached_free));
  sample(&o, "kvserve_kv_blocks", "state=\"in_use\"", num(s.cache.blocks_in_use));
  metric(&o, "kvserve_kv_blocks_capacity", "gauge", "KV blocks in the pool.", s.cache.num_blocks);
  metric(&o, "kvserve_kv_pool_bytes", "gauge", "Bytes of the KV pool.", s.pool_bytes);
  metric(&o, "kvserve_kv_key_tail_bytes", "gauge",
         "Bytes of the f16 keys of partly filled 16-token groups (per-channel K formats; 0 "
         "otherwise), taken from the KV memory budget before the pool.",
         s.key_tail_bytes);
  metric(&o, "kvserve_kv_recent_window_bytes", "gauge",
         "Bytes of the recent-token window (--kv-recent-window: each running sequence's newest "
         "tokens in f16, K and V; 0 without one), taken from the KV memory budget before the pool.",
         s.recent_window_bytes);
  metric(&o, "kvserve_kv_block_bytes", "gauge", "Bytes of one KV block.", s.block_bytes);
  header(&o, "kvserve_model_weight_bytes", "gauge",
         "Bytes of the model's weights: as the file stores them, and resident in memory (packed "
         "for the integer GEMM, plus the tensors read from the file).");
  sample(&o, "kvserve_model_weight_bytes", "form=\"file\"", num(s.weight_file_bytes));
  sample(&o, "kvserve_model_weight_bytes", "form=\"resident\"", num(s.weight_resident_bytes));
  metric(&o, "kvserve_model_weight_pack_seconds", "gauge",
         "Time the model load spent packing the weights.", s.weight_pack_seconds);
  metric(&o, "kvserve_kv_fragmentation_ratio", "gauge",
         "Allocated KV slots no sequence has filled, over allocated slots (0..1).",
         s.fragmentation);
  metric(&o, "kvserve_kv_evictions_total", "counter", "Cached-free blocks evicted for reuse.",
         s.cache.evictions);
  metric(&o, "kvserve_swap_used_bytes", "gauge", "Bytes of the host swap area in use.",
         s.swap_used_bytes);
  metric(&o, "kvserve_swap_space_bytes", "gauge", "Bytes of the host swap area (--swap-space).",
         s.swap_space_bytes);
  metric(&o, "kvserve_prefix_cache_queries_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache.", s.cache.prefix_query_tokens);
  metric(&o, "kvserve_prefix_cache_hits_tokens_total", "counter",
         "Prompt tokens served from the prefix cache (whole blocks).",
         s.cache.prefix_hit_block_tokens);
  header(
      &o, "kvserve_tenant_prefix_cache_queries_tokens_total", "counter",
      "Prompt tokens looked up, per tenant (label: tenant name and/or keyed hash of cache_salt).");
  for (const auto& t : snap.tenants)
    sample(&o, "kvserve_tenant_prefix_cache_queries_tokens_total", "tenant=\"" + t.label + "\"",
           num(t.query_tokens));
  header(&o, "kvserve_tenant_prefix_cache_hits_tokens_total", "counter",
         "Prompt tokens served from the prefix cache in whole blocks, per tenant.");
  for (const auto& t : snap.tenants)
    sample(&o, "kvserve_tenant_prefix_cache_hits_tokens_total", "tenant=\"" + t.label + "\"",
           num(t.hit_tokens));
  header(&o, "kvserve_tenant_kv_blocks", "gauge",
         "KV blocks held (in use or cached-free) per tenant.");
  for (const auto& t : snap.tenants)
    sample(&o, "kvserve_tenant_kv_blocks", "tenant=\"" + t.label + "\"", num(t.blocks_held));
  header(&o, "kvserve_route_prefix_cache_queries_tokens_total", "counter",
         "Prompt tokens of finished requests, per route.");
  for (const auto& [route, r] : routes_)
    sample(&o, "kvserve_route_prefix_cache_queries_tokens_total",
           "route=\"" + escape_label(route) + "\"", num(r.query_tokens));
  header(&o, "kvserve_route_prefix_cache_hits_tokens_total", "counter",
         "Cached prompt tokens (whole blocks) of finished requests, per route.");
  for (const auto& [route, r] : routes_)
    sample(&o, "kvserve_route_prefix_cache_hits_tokens_total",
           "route=\"" + escape_label(route) + "\"", num(r.hit_tokens));
  metric(&o, "kvserve_attention_sink_refused_hits_total", "counter",
         "Prefix hits not taken because the attention sink (--kv-attention-sink) no longer knew "
         "the prompt's first token: the request computed its cached prefix again.",
         s.attention_sink_refused_hits);
  header(&o, "kvserve_preemptions_total", "counter", "Preemptions, by mode.");
  sample(&o, "kvserve_preemptions_total", "mode=\"recompute\"", num(s.preemptions_recompute));
  sample(&o, "kvserve_preemptions_total", "mode=\"swap\"", num(s.preemptions_swap));
  metric(&o, "kvserve_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         prompt_tokens_);
  metric(&o, "kvserve_generation_tokens_total", "counter",
         "Generated tokens of finished requests (all samples).", generation_tokens_);
  header(&o, "kvserve_request_finished_total", "counter", "Finished requests by reason.");
  for (const auto& [reason, n] : finished_)
    sample(&o, "kvserve_request_finished_total", "finish_reason=\"" + reason + "\"", num(n));
  header(&o, "kvserve_http_requests_total", "counter", "HTTP responses by route and status.");
  for (const auto& [key, n] : http_)
    sample(
        &o, "kvserve_http_requests_total",
        "route=\"" + escape_label(key.first) + "\",status=\"" + std::to_string(key.second) + "\"",
        num(n));
  header(&o, "kvserve_time_to_first_token_seconds", "histogram",
         "Arrival to first token, by prompt length in tokens.");
  for (int i = 0; i < kPromptBuckets; ++i)
    ttft_[i].render("kvserve_time_to_first_token_seconds",
                    std::string("prompt_tokens=\"") + kPromptBucketNames[i] + "\"", &o);
  header(&o, "kvserve_inter_token_latency_seconds", "histogram",
         "Time between consecutive tokens of a sample.");
  itl_.render("kvserve_inter_token_latency_seconds", "", &o);
  header(&o, "kvserve_e2e_request_latency_seconds", "histogram",
         "Arrival to the last token of a request.");
  e2e_.render("kvserve_e2e_request_latency_seconds", "", &o);
  header(&o, "kvserve_request_max_model_len_fraction", "histogram",
         "Tokens of a finished sample (prompt + generated) over --max-model-len.");
  length_fraction_.render("kvserve_request_max_model_len_fraction", "", &o);
  if (s.offload.enabled) render_offload(s.offload, &o);
  metric(&o, "kvserve_kv_views_taken_total", "counter",
         "KV views taken on the engine thread for /v1/kv, /metrics and the dashboard stream "
         "(at most one per 100 ms plus one per request admitted or finished, whoever polls).",
         snap.kv_views_taken);
  if (snap.kv_events) {
    const KvEventPublisherStats& k = *snap.kv_events;
    metric(&o, "kvserve_kv_events_batches_published_total", "counter",
           "KV event batches sent on the PUB socket (one per step that changed the cache).",
           k.batches_published);
    metric(&o, "kvserve_kv_events_published_total", "counter", "KV events sent.",
           k.events_published);
    metric(&o, "kvserve_kv_events_batches_dropped_total", "counter",
           "KV event batches dropped because the publisher's queue was full.", k.batches_dropped);
    metric(&o, "kvserve_kv_events_replay_requests_total", "counter",
           "Replay requests received on the ROUTER socket.", k.replay_requests);
    metric(&o, "kvserve_kv_events_bad_replay_requests_total", "counter",
           "Malformed replay requests (ignored).", k.bad_replay_requests);
    metric(&o, "kvserve_kv_events_replay_requests_refused_total", "counter",
           "Replay requests refused: over the request rate, or every replay session taken.",
           k.replay_requests_refused);
    metric(&o, "kvserve_kv_events_replay_sessions_dropped_total", "counter",
           "Replay sessions dropped because the requester stopped reading.",
           k.replay_sessions_dropped);
    metric(&o, "kvserve_kv_events_engine_seconds_total", "counter",
           "Engine-thread time spent collecting and handing over KV events.", k.engine_seconds);
    metric(&o, "kvserve_kv_events_publisher_seconds_total", "counter",
           "Publisher-thread time spent encoding and sending KV event batches.",
           k.publisher_seconds);
  }
  return o;
}

}  // namespace kvs
