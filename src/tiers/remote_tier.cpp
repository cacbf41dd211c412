#include "tiers/remote_tier.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/check.h"

namespace kvs {

namespace {
constexpr uint64_t kValueNamespaceTag = 0x6b76732d72656d76ULL;  // "kvs-remv"
constexpr uint32_t kVirtualNodes = 64;                          // ring points per instance
constexpr size_t kMaxWriteBatch = 32;                           // SETs per round trip
constexpr size_t kMaxStoredKeys = size_t{1} << 20;
}  // namespace

double RemoteTier::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

RemoteTier::RemoteTier(const RemoteTierConfig& config) : config_(config) {
  const ExtentNamespace& ns = config.ns;
  const uint64_t words[6] = {ns.model_fingerprint,
                             static_cast<uint64_t>(ns.k_dtype),
                             static_cast<uint64_t>(ns.v_dtype),
                             ns.block_size,
                             ns.block_bytes,
                             ns.secret_id};
  value_ns_ = XXH3_64bits_withSeed(words, sizeof(words), kValueNamespaceTag);
  for (uint32_t i = 0; i < config.endpoints.size(); ++i) {
    const RedisEndpoint& e = config.endpoints[i];
    instances_.push_back({.endpoint = e,
                          .reader = std::make_unique<RedisClient>(e, config.timeout_ms),
                          .writer = std::make_unique<RedisClient>(e, config.timeout_ms),
                          .breaker = CircuitBreaker()});
    const std::string url = e.url();
    for (uint32_t v = 0; v < kVirtualNodes; ++v)
      ring_.emplace_back(XXH3_64bits_withSeed(url.data(), url.size(), v), i);
  }
  std::sort(ring_.begin(), ring_.end());
}

Result<std::unique_ptr<RemoteTier>> RemoteTier::create(const RemoteTierConfig& config) {
  if (config.endpoints.empty()) return invalid_argument("remote tier: no --kv-remote endpoint");
  if (config.ns.block_bytes == 0 || config.ns.block_size == 0)
    return invalid_argument("remote tier: empty block geometry");
  // hiredis writes with write(2): a connection the server reset would raise SIGPIPE, which kills
  // the process by default (serve ignores it already; generate and perplexity take --kv-remote
  // too). A dead server must be an error value, never the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<RemoteTier> t(new RemoteTier(config));
  t->writer_connects_.assign(config.endpoints.size(), 0);
  t->reader_connects_.assign(config.endpoints.size(), 0);
  t->measure_startup_bandwidth();
  t->writer_ = std::thread([p = t.get()] { p->writer_loop(); });
  t->reader_ = std::thread([p = t.get()] { p->reader_loop(); });
  return t;
}

RemoteTier::~RemoteTier() {
  flush(std::max(0.5, 4.0 * config_.timeout_ms / 1000.0));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  write_cv_.notify_all();
  read_cv_.notify_all();
  writer_.join();
  reader_.join();
}

void RemoteTier::measure_startup_bandwidth() {
  // One block-sized probe value written and read back on the first instance (before the
  // threads own the connections). Unreachable: left unknown; the online measure takes over.
  Instance& in = instances_[0];
  const std::string key = "kvs:probe:" + std::to_string(::getpid());
  std::vector<std::pair<std::string, std::vector<uint8_t>>> item;
  item.emplace_back(key, std::vector<uint8_t>(config_.ns.block_bytes, 0x5a));
  if (!in.reader->set_many(item, 60).is_ok()) return;
  const double t0 = now();
  const std::vector<std::string> keys = {key};
  const auto got = in.reader->get_many(keys);
  const double secs = now() - t0;
  (void)in.reader->del(key);
  if (got.is_ok() && (*got)[0].kind == RedisValue::Kind::kValue && secs > 0)
    startup_bytes_per_s_ = config_.ns.block_bytes / secs;
}

std::string RemoteTier::key_of(uint64_t chain_key) const {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "kvs:%016llx:%016llx", static_cast<unsigned long long>(value_ns_),
                static_cast<unsigned long long>(chain_key));
  return buf;
}

uint32_t RemoteTier::instance_of(uint64_t chain_key) const {
  // The chain key is already a hash; mixing it once more spreads consecutive keys of one chain.
  const uint64_t point = XXH3_64bits(&chain_key, sizeof(chain_key));
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(point, uint32_t{0}));
  if (it == ring_.end()) it = ring_.begin();
  return it->second;
}

bool RemoteTier::matches(const Fetched& f, const TierBlockMeta& want,
                         std::span<const int32_t> tokens) const {
  return f.meta.parent_key == want.parent_key && f.meta.salt_check == want.salt_check &&
         std::equal(f.tokens.begin(), f.tokens.end(), tokens.begin(), tokens.end());
}

RemoteTier::Readiness RemoteTier::readiness(const TierBlockMeta& want,
                                            std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = fetched_.find(want.key); it != fetched_.end())
    return matches(it->second, want, tokens) ? Readiness::kReady : Readiness::kMissing;
  if (pending_.contains(want.key)) return Readiness::kPending;
  const double t = now();
  if (const auto it = missing_until_.find(want.key); it != missing_until_.end()) {
    if (t < it->second) return Readiness::kMissing;
    missing_until_.erase(it);
  }
  if (instances_[instance_of(want.key)].breaker.refusing(t)) return Readiness::kMissing;
  return Readiness::kUnknown;
}

void RemoteTier::fetch(std::span<const TierBlockMeta> blocks, std::span<const int32_t> tokens) {
  const uint32_t bs = config_.ns.block_size;
  KVS_CHECK(tokens.size() >= blocks.size() * bs);
  std::vector<Lookup> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double t = now();
    for (size_t i = 0; i < blocks.size(); ++i) {
      const uint64_t key = blocks[i].key;
      if (fetched_.contains(key) || pending_.contains(key)) continue;
      if (const auto it = missing_until_.find(key); it != missing_until_.end() && t < it->second)
        continue;
      const auto tk = tokens.subspan(i * bs, bs);
      job.push_back({blocks[i], std::vector<int32_t>(tk.begin(), tk.end())});
      pending_.insert(key);
    }
    if (job.empty()) return;
    fetches_.push_back(std::move(job));
  }
  read_cv_.notify_one();
}

bool RemoteTier::wait_for_reads(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (fetches_.empty() && !fetching_) return false;
  read_done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds));
  return true;
}

Result<VerifiedBlock> RemoteTier::verified_block(const TierBlockMeta& want,
                                                 std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = fetched_.find(want.key);
  if (it == fetched_.end() || !matches(it->second, want, tokens))
    return not_found("remote tier: block not fetched");
  it->second.last_used = ++tick_;
  return VerifiedBlock{
      .buffer = it->second.payload, .offset = 0, .bytes = it->second.payload->size()};
}

bool RemoteTier::put(const TierBlockMeta& meta, std::span<const int32_t> tokens,
                     const uint8_t* bytes) {
  Write w;
  w.key = meta.key;
  w.instance = instance_of(meta.key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double t = now();
    if (recently_stored(meta.key, t)) return false;
    if (instances_[w.instance].breaker.refusing(t) || writes_.size() >= config_.max_queued_writes ||
        queued_bytes_ + config_.ns.block_bytes > config_.max_queued_bytes) {
      ++counters_.dropped_writes;
      return false;
    }
    if (stored_.size() >= kMaxStoredKeys) stored_.clear();
    stored_[meta.key] = t;
    queued_bytes_ += config_.ns.block_bytes;
  }
  w.header.ns = config_.ns;
  w.header.blocks.push_back(
      {.key = meta.key, .parent_key = meta.parent_key, .salt_check = meta.salt_check});
  w.header.tokens.assign(tokens.begin(), tokens.end());
  w.header.header_bytes = extent_header_size(1, config_.ns.block_size);
  w.payload.assign(bytes, bytes + config_.ns.block_bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    writes_.push_back(std::move(w));
  }
  write_cv_.notify_one();
  return true;
}

bool RemoteTier::flush(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return write_done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                 [&] { return writes_.empty() && writing_ == 0; });
}

void RemoteTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    write_cv_.wait(lock, [&] { return stop_ || !writes_.empty(); });
    if (writes_.empty()) return;  // stop_ and nothing left
    // One round trip: consecutive writes bound for the front's instance.
    const uint32_t inst = writes_.front().instance;
    std::vector<Write> batch;
    while (!writes_.empty() && writes_.front().instance == inst && batch.size() < kMaxWriteBatch) {
      queued_bytes_ -= writes_.front().payload.size();
      batch.push_back(std::move(writes_.front()));
      writes_.pop_front();
    }
    writing_ = batch.size();
    Instance& in = instances_[inst];
    const bool allowed = !stop_ && in.breaker.allow(now());
    lock.unlock();
    Status st = unavailable("breaker open");
    uint64_t bytes = 0;
    if (allowed) {
      std::vector<std::pair<std::string, std::vector<uint8_t>>> items;
      for (const Write& w : batch) {
        items.emplace_back(key_of(w.key), encode_extent(config_.mac_key, w.header, w.payload));
        bytes += items.back().second.size();
      }
      st = in.writer->set_many(items, config_.ttl_seconds);
    }
    lock.lock();
    note_connects(inst, *in.writer, writer_connects_);
    if (allowed) {
      // A SET Redis refused (out of memory) still proves the link works.
      if (st.is_ok() || st.code() == StatusCode::kResourceExhausted)
        in.breaker.on_success();
      else
        in.breaker.on_failure(now());
      if (!st.is_ok()) ++counters_.errors;
      if (in.breaker.state() == CircuitBreaker::State::kOpen) stored_.clear();  // it may be gone
    }
    if (st.is_ok()) {
      counters_.blocks_stored += batch.size();
      counters_.bytes_written += bytes;
    } else {
      counters_.dropped_writes += batch.size();
      for (const Write& w : batch) stored_.erase(w.key);
    }
    writing_ = 0;
    write_done_cv_.notify_all();
  }
}

void RemoteTier::reader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    read_cv_.wait(lock, [&] { return stop_ || !fetches_.empty(); });
    if (stop_) {
      for (const auto& job : fetches_)
        for (const Lookup& l : job) pending_.erase(l.meta.key);
      fetches_.clear();
      read_done_cv_.notify_all();
      return;
    }
    std::vector<Lookup> job = std::move(fetches_.front());
    fetches_.pop_front();
    fetching_ = true;
    lock.unlock();
    run_fetch(std::move(job));
    lock.lock();
    fetching_ = false;
    read_done_cv_.notify_all();
  }
}

bool RemoteTier::verify(const Lookup& want, std::span<const uint8_t> value) const {
  const Result<ExtentHeader> h = decode_extent(config_.mac_key, value);
  if (!h.is_ok() || !(h->ns == config_.ns) || h->blocks.size() != 1) return false;
  const TierBlockMeta& m = h->blocks[0];
  return m.key == want.meta.key && m.parent_key == want.meta.parent_key &&
         m.salt_check == want.meta.salt_check && h->tokens == want.tokens;
}

void RemoteTier::run_fetch(std::vector<Lookup> job) {
  std::map<uint32_t, std::vector<size_t>> by_instance;
  for (size_t i = 0; i < job.size(); ++i) by_instance[instance_of(job[i].meta.key)].push_back(i);
  // Expected bytes of one value: an extent of one block.
  const uint64_t value_bytes =
      extent_header_size(1, config_.ns.block_size) + config_.ns.block_bytes + kExtentMacBytes;
  const size_t per_chunk =
      std::max<size_t>(1, static_cast<size_t>(config_.fetch_chunk_bytes / value_bytes));
  for (const auto& [inst, idx] : by_instance)
    for (size_t first = 0; first < idx.size(); first += per_chunk)
      fetch_chunk(
          inst, job,
          std::span<const size_t>(idx).subspan(first, std::min(per_chunk, idx.size() - first)));
}

void RemoteTier::log_fetch_failure(const std::string& why) {
  ++failures_since_log_;
  const double t = now();
  if (t - last_failure_log_ < config_.log_interval_seconds) return;
  std::fprintf(stderr,
               "kvserve: remote KV tier: %llu fetch(es) failed in the last %.0f s, the blocks are "
               "recomputed; last: %s\n",
               static_cast<unsigned long long>(failures_since_log_),
               last_failure_log_ < 0 ? 0.0 : t - last_failure_log_, why.c_str());
  last_failure_log_ = t;
  failures_since_log_ = 0;
}

void RemoteTier::fetch_chunk(uint32_t inst, std::vector<Lookup>& job, std::span<const size_t> idx) {
  Instance& in = instances_[inst];
  bool allowed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    allowed = !stop_ && in.breaker.allow(now());
    counters_.lookups += idx.size();
  }
  std::vector<std::string> keys;
  for (size_t i : idx) keys.push_back(key_of(job[i].meta.key));
  // The deadline grows with the bytes expected: on a busy machine a long run is slow, not gone.
  const uint64_t value_bytes =
      extent_header_size(1, config_.ns.block_size) + config_.ns.block_bytes + kExtentMacBytes;
  const double expected = static_cast<double>(value_bytes) * static_cast<double>(idx.size());
  const uint32_t deadline_ms = static_cast<uint32_t>(std::min<double>(
      60000.0, config_.timeout_ms + 1000.0 * expected / config_.min_fetch_bytes_per_s));
  Result<std::vector<RedisValue>> got = unavailable("breaker open");
  const double t0 = now();
  if (allowed) got = in.reader->get_many(keys, deadline_ms);
  const double secs = now() - t0;
  std::vector<uint8_t> good(idx.size(), 0);  // 0 missing, 1 verified, 2 bad
  uint64_t bytes = 0;
  if (got.is_ok()) {
    for (size_t k = 0; k < idx.size(); ++k) {
      const RedisValue& v = (*got)[k];
      if (v.kind == RedisValue::Kind::kMissing) continue;
      bytes += v.bytes.size();
      good[k] = v.kind == RedisValue::Kind::kValue && verify(job[idx[k]], v.bytes) ? 1 : 2;
    }
  }
  std::vector<std::string> bad_keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    note_connects(inst, *in.reader, reader_connects_);
    if (allowed) {
      if (got.is_ok()) {
        in.breaker.on_success();
        ++counters_.reads;
        counters_.read_seconds += secs;
        counters_.bytes_read += bytes;
      } else {
        in.breaker.on_failure(now());
        ++counters_.errors;
        if (in.breaker.state() == CircuitBreaker::State::kOpen) stored_.clear();
        log_fetch_failure(got.status().message() + " (" + std::to_string(idx.size()) +
                          " blocks, deadline " + std::to_string(deadline_ms) + " ms)");
      }
    }
    const double until = now() + config_.missing_ttl_seconds;
    for (size_t k = 0; k < idx.size(); ++k) {
      Lookup& l = job[idx[k]];
      pending_.erase(l.meta.key);
      if (good[k] == 1) {
        ++counters_.found;
        const size_t hb = extent_header_size(1, config_.ns.block_size);
        const std::vector<uint8_t>& v = (*got)[k].bytes;
        keep_fetched(l,
                     std::vector<uint8_t>(v.begin() + hb, v.begin() + hb + config_.ns.block_bytes));
        stored_[l.meta.key] = now();
        continue;
      }
      if (good[k] == 2) {
        ++counters_.checksum_failures;
        stored_.erase(l.meta.key);  // recomputed, it is written again
        bad_keys.push_back(keys[k]);
      } else if (got.is_ok()) {
        ++counters_.missing;
        stored_.erase(l.meta.key);  // expired or evicted there: ours is written again
      }
      missing_until_[l.meta.key] = until;
    }
    if (missing_until_.size() > kMaxStoredKeys) missing_until_.clear();
  }
  for (const std::string& k : bad_keys) (void)in.reader->del(k);
}

void RemoteTier::keep_fetched(const Lookup& l, std::vector<uint8_t> payload) {
  if (fetched_.contains(l.meta.key)) return;
  fetched_bytes_ += payload.size();
  fetched_.emplace(
      l.meta.key,
      Fetched{.tokens = l.tokens,
              .meta = l.meta,
              .payload = std::make_shared<const std::vector<uint8_t>>(std::move(payload)),
              .last_used = ++tick_});
  while (fetched_bytes_ > config_.fetched_cache_bytes && fetched_.size() > 1) {
    auto lru = fetched_.begin();
    for (auto it = fetched_.begin(); it != fetched_.end(); ++it)
      if (it->second.last_used < lru->second.last_used) lru = it;
    fetched_bytes_ -= lru->second.payload->size();
    fetched_.erase(lru);
  }
}

bool RemoteTier::recently_stored(uint64_t key, double now) const {
  const auto it = stored_.find(key);
  if (it == stored_.end()) return false;
  return config_.ttl_seconds == 0 || now - it->second < config_.ttl_seconds / 2.0;
}

void RemoteTier::note_connects(uint32_t inst, const RedisClient& c, std::vector<uint64_t>& seen) {
  const uint64_t n = c.connects();
  // The first connection is no news; a later one may be to a restarted (empty) server.
  if (n != seen[inst] && seen[inst] != 0) stored_.clear();
  seen[inst] = n;
}

RemoteTierCounters RemoteTier::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  RemoteTierCounters c = counters_;
  c.queued_writes = writes_.size() + writing_;  // not yet in Redis: queued or being written
  for (const Instance& in : instances_)
    c.instances.push_back({.url = in.endpoint.url(),
                           .breaker = in.breaker.state(),
                           .times_opened = in.breaker.times_opened()});
  return c;
}

}  // namespace kvs
