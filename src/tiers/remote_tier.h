// RemoteTier: L4, KV blocks in one or more Redis instances shared by several engines (replicas).
// A block one replica computed can be loaded by another.
//
//   - Values are the disk tier's self-describing extents (kv_extent.h), one block each, with a
//     MAC under the server secret: a value written by anyone without the secret (a forged or
//     planted value) fails verification, is deleted and counted, and the block is recomputed.
//     Keys are "kvs:<value namespace>:<chain key>", where the value namespace hashes the model
//     fingerprint, the stored K/V formats, the block size, the block's byte count and the
//     secret's public id, and the chain key is the block's tier key (tier_key.h: rooted in the
//     secret and the tenant, it covers every token id before it). Replicas of another model,
//     format or secret never even look at each other's keys.
//   - Blocks are spread over the instances by consistent hashing of the chain key.
//   - Writes are asynchronous: put() copies the bytes into a bounded queue that a writer thread
//     sends (pipelined SETs, optional TTL). When the queue is full or the instance's breaker is
//     open, the block is dropped and counted; a step never waits for Redis.
//   - Reads are asynchronous too: fetch() queues the lookup of a run of chain blocks on a reader
//     thread, which sends pipelined GETs in chunks of at most fetch_chunk_bytes of expected
//     values, each chunk with its own deadline (the timeout plus the chunk's bytes at
//     min_fetch_bytes_per_s, so a long run on a busy machine is not cut by a deadline sized for
//     one block), verifies each value (MAC, namespace, key, parent, salt check, token ids) into a
//     bounded cache of fetched blocks; verified_block() hands out a shared handle (no copy). A bad
//     value (or a key of another type) is deleted and counted; the caller recomputes. A failed
//     fetch is logged at most once per log_interval_seconds, with its reason.
//   - Every command has a timeout. Each instance has a circuit breaker: after repeated errors it
//     opens, the tier skips that instance, and it probes again with backoff. With a password in
//     the URL every connection authenticates (AUTH).
//   - No request ever fails because Redis is slow, full or down: every failure is a miss.
// Thread safety: every public method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "kvcache/tier_key.h"
#include "tiers/circuit_breaker.h"
#include "tiers/kv_extent.h"
#include "tiers/redis_client.h"
#include "tiers/verified_block.h"

namespace kvs {

struct RemoteTierConfig {
  std::vector<RedisEndpoint> endpoints;
  uint32_t ttl_seconds = 0;  // 0: values never expire (Redis' own eviction policy applies)
  uint32_t timeout_ms = 50;  // connect and every command (a fetch chunk: see below)
  ExtentNamespace ns;        // what the values hold (the stored format, the secret's id)
  SecretKey mac_key{};       // the values' MAC key (TierSecrets::mac)
  uint64_t fetch_chunk_bytes = uint64_t{4} << 20;      // expected value bytes per GET pipeline
  double min_fetch_bytes_per_s = 32.0 * (1 << 20);     // a chunk's deadline: timeout + bytes/this
  double log_interval_seconds = 10;                    // failed fetches are logged this rarely
  uint32_t max_queued_writes = 512;                    // blocks waiting for the writer
  uint64_t max_queued_bytes = uint64_t{256} << 20;     // and their bytes
  uint64_t fetched_cache_bytes = uint64_t{256} << 20;  // verified blocks waiting to be loaded
  double missing_ttl_seconds = 1.0;                    // how long a known miss is not asked again
};

struct RemoteInstanceState {
  std::string url;
  CircuitBreaker::State breaker = CircuitBreaker::State::kClosed;
  uint64_t times_opened = 0;
};

struct RemoteTierCounters {
  uint64_t blocks_stored = 0;  // SETs Redis acknowledged
  uint64_t bytes_written = 0;
  uint64_t dropped_writes = 0;     // queue full, breaker open, or a failed SET
  uint64_t lookups = 0;            // keys asked for
  uint64_t found = 0;              // values that verified
  uint64_t missing = 0;            // keys Redis did not have
  uint64_t checksum_failures = 0;  // values that failed verification (deleted)
  uint64_t errors = 0;             // failed or timed-out commands
  uint64_t bytes_read = 0;
  double read_seconds = 0;
  uint64_t reads = 0;  // GET round trips
  uint64_t queued_writes = 0;
  std::vector<RemoteInstanceState> instances;
};

class RemoteTier {
 public:
  // Never fails for an unreachable server (the breaker handles that); fails for no endpoints.
  static Result<std::unique_ptr<RemoteTier>> create(const RemoteTierConfig& config);
  ~RemoteTier();  // sends what is queued (bounded by the timeout), then stops the threads
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  [[nodiscard]] const RemoteTierConfig& config() const { return config_; }
  // The Redis key of a chain key.
  [[nodiscard]] std::string key_of(uint64_t chain_key) const;
  // Index into config().endpoints of the instance that holds a chain key.
  [[nodiscard]] uint32_t instance_of(uint64_t chain_key) const;

  enum class Readiness : uint8_t { kUnknown, kPending, kReady, kMissing };
  // kReady: fetched and verified (verified_block hands it out); kPending: a fetch is queued or
  // running; kMissing: Redis did not have it (or its instance is unavailable) recently; kUnknown:
  // not asked recently. Never blocks on I/O.
  [[nodiscard]] Readiness readiness(const TierBlockMeta& want, std::span<const int32_t> tokens);
  // Queues one pipelined lookup of these chain blocks (tokens: block_size ids per block, in
  // order); blocks already pending, ready or known missing are skipped.
  void fetch(std::span<const TierBlockMeta> blocks, std::span<const int32_t> tokens);
  // Waits until a queued fetch finishes or timeout_seconds pass; false when nothing is queued.
  bool wait_for_reads(double timeout_seconds);
  // A handle on a fetched and verified block (ns.block_bytes bytes); an error if not ready.
  Result<VerifiedBlock> verified_block(const TierBlockMeta& want, std::span<const int32_t> tokens);

  // Queues one block for writing (its bytes are copied now). False when it was dropped (queue
  // full, or every path to its instance is open-circuited) or is already stored.
  bool put(const TierBlockMeta& meta, std::span<const int32_t> tokens, const uint8_t* bytes);
  // Waits until the write queue is empty or timeout_seconds pass.
  bool flush(double timeout_seconds);

  [[nodiscard]] RemoteTierCounters counters() const;
  // Read bandwidth of a block-sized value measured at startup (0: Redis was not reachable).
  [[nodiscard]] double startup_bytes_per_s() const { return startup_bytes_per_s_; }

 private:
  struct Instance {
    RedisEndpoint endpoint;
    std::unique_ptr<RedisClient> reader, writer;  // one connection per thread
    CircuitBreaker breaker;
  };
  struct Write {
    uint32_t instance = 0;
    uint64_t key = 0;
    ExtentHeader header;
    std::vector<uint8_t> payload;
  };
  struct Lookup {
    TierBlockMeta meta;
    std::vector<int32_t> tokens;
  };
  struct Fetched {
    std::vector<int32_t> tokens;
    TierBlockMeta meta;
    std::shared_ptr<const std::vector<uint8_t>> payload;
    uint64_t last_used = 0;
  };

  explicit RemoteTier(const RemoteTierConfig& config);
  void measure_startup_bandwidth();
  void writer_loop();
  void reader_loop();
  // The GETs of one fetch (no lock held during I/O), then their verification.
  void run_fetch(std::vector<Lookup> job);
  // One pipelined chunk of a fetch on one instance, with its own deadline.
  void fetch_chunk(uint32_t inst, std::vector<Lookup>& job, std::span<const size_t> idx);
  void log_fetch_failure(const std::string& why);  // mu_ held
  // Verifies one value against what was asked; true if it may be used.
  [[nodiscard]] bool verify(const Lookup& want, std::span<const uint8_t> value) const;
  void keep_fetched(const Lookup& l, std::vector<uint8_t> payload);  // mu_ held
  [[nodiscard]] bool matches(const Fetched& f, const TierBlockMeta& want,
                             std::span<const int32_t> tokens) const;
  static double now();

  RemoteTierConfig config_;
  uint64_t value_ns_ = 0;
  double startup_bytes_per_s_ = 0;
  std::vector<std::pair<uint64_t, uint32_t>> ring_;  // (point, instance), sorted
  mutable std::mutex mu_;
  std::vector<Instance> instances_;
  std::condition_variable write_cv_, write_done_cv_, read_cv_, read_done_cv_;
  std::deque<Write> writes_;
  size_t writing_ = 0;  // blocks of the batch being written now
  std::deque<std::vector<Lookup>> fetches_;
  bool fetching_ = false;
  std::unordered_set<uint64_t> pending_;                // keys queued or being fetched
  std::unordered_map<uint64_t, double> missing_until_;  // key -> until when it is a known miss
  std::unordered_map<uint64_t, Fetched> fetched_;
  uint64_t fetched_bytes_ = 0;
  uint64_t tick_ = 0;
  // Keys this process stored (or found), and when: not sent again while Redis should still have
  // them (for half the TTL; forgotten on a miss, a reconnect or an open breaker).
  std::unordered_map<uint64_t, double> stored_;
  uint64_t queued_bytes_ = 0;
  // The writer's and reader's connection counts per instance when last seen (reconnects).
  std::vector<uint64_t> writer_connects_, reader_connects_;
  // Forgets stored_ when an instance's connection was re-made (a restarted Redis is empty).
  void note_connects(uint32_t inst, const RedisClient& c, std::vector<uint64_t>& seen);  // mu_ held
  [[nodiscard]] bool recently_stored(uint64_t key, double now) const;                    // mu_ held
  RemoteTierCounters counters_;
  double last_failure_log_ = -1e300;
  uint64_t failures_since_log_ = 0;
  bool stop_ = false;
  std::thread writer_, reader_;
};

}  // namespace kvs
