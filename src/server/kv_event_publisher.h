// KvEventPublisher: sends KV event batches (kv_event_batch.h) over ZeroMQ as vLLM's
// ZmqEventPublisher does, so that existing KV-aware routers can subscribe to kvserve replicas.
//
//   PUB socket (bound to --kv-events-endpoint): one multipart message per batch,
//     [topic, seq as 8-byte big-endian unsigned, payload]; seq counts batches from 0.
//   ROUTER socket (bound to --kv-events-replay-endpoint, optional): a request
//     [identity, "", start seq (8-byte big-endian)] is answered with every buffered batch whose
//     seq >= start, oldest first, as [identity, "", topic, seq, payload], then the end marker
//     [identity, "", "", 0xff x 8, ""]. A malformed request is logged, counted and ignored.
//
// Events are for a trusted network (docs/security.md):
//   - endpoints must be loopback (tcp://127.0.0.1:PORT, tcp://[::1]:PORT, localhost) or ipc://
//     unless allow_remote (--kv-events-allow-remote): they carry every tenant's block hashes
//     and, unless token_ids is off (--no-kv-events-token-ids), their token ids;
//   - with a CURVE secret key (--kv-events-curve-secret-file) both sockets are CURVE servers
//     and only the client public keys listed (--kv-events-curve-clients) are admitted, through a
//     ZAP handler: a plain subscriber, or one with another key, receives nothing;
//   - every queue a client can fill is bounded: the PUB socket's per-subscriber high-water mark
//     drops for a subscriber that does not read; replays run as at most max_replay_sessions
//     sessions (one per requester) that send as fast as the requester reads, through a bounded
//     per-peer pipe (ROUTER_MANDATORY: a full pipe waits, nothing is buffered without bound), are
//     dropped when the requester stops reading for replay_idle_seconds, and new replay requests
//     beyond max_replay_requests_per_s are refused. Incoming messages are capped in size.
//
// publish() never blocks the engine: batches go through a bounded queue to the publisher thread,
// which encodes and sends them and keeps the last `buffer_batches` for replay; a batch that finds
// the queue full is dropped and counted (subscribers see the gap in seq).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/kv_event_batch.h"

namespace kvs {

struct KvEventPublisherConfig {
  std::string endpoint;         // e.g. tcp://127.0.0.1:5557
  std::string replay_endpoint;  // empty: no replay
  std::string topic;
  uint32_t block_size = 16;
  int32_t data_parallel_rank = 0;
  size_t buffer_batches = 10000;  // kept for replay (vLLM's buffer_steps)
  size_t max_queued_batches = 4096;
  bool allow_remote = false;  // bind beyond loopback
  bool token_ids = true;      // BlockStored carries the blocks' token ids
  // CURVE: the server's secret key (Z85, 40 characters) and the admitted client public keys
  // (Z85); both empty = no authentication.
  std::string curve_secret_key;
  std::vector<std::string> curve_client_keys;
  int pub_hwm = 10000;    // messages queued per subscriber before PUB drops for it
  int replay_hwm = 1000;  // messages queued per replay requester before the session waits
  size_t max_replay_sessions = 8;
  double max_replay_requests_per_s = 20;
  double replay_idle_seconds = 10;
};

struct KvEventPublisherStats {
  uint64_t batches_published = 0;
  uint64_t events_published = 0;
  uint64_t batches_dropped = 0;  // queue full
  uint64_t replay_requests = 0;
  uint64_t bad_replay_requests = 0;
  uint64_t replay_requests_refused = 0;  // over the rate, or every session taken
  uint64_t replay_sessions_dropped = 0;  // the requester stopped reading
  double engine_seconds = 0;     // engine-thread time handing batches over (what a step pays)
  double publisher_seconds = 0;  // the publisher thread's time encoding and sending
};

// Checks an events endpoint: loopback or ipc:// unless allow_remote; names the flag to use.
[[nodiscard]] Status check_event_endpoint(const std::string& endpoint, const char* flag,
                                          bool allow_remote);
// Reads a CURVE key file: one Z85 key (40 characters) per line, # comments; for the secret key
// file, the ServerSecret file checks (this user's own, mode 600).
[[nodiscard]] Result<std::vector<std::string>> read_curve_keys(const std::string& path,
                                                               bool secret);
// A fresh CURVE key pair (Z85 public, Z85 secret).
[[nodiscard]] Result<std::pair<std::string, std::string>> curve_keypair();

class KvEventPublisher {
 public:
  // Binds the sockets (an error if an endpoint is malformed, taken, or not loopback without
  // allow_remote) and starts the thread. The first batch (seq 0) is AllBlocksCleared: a
  // subscriber learns that this replica's cache starts empty.
  static Result<std::unique_ptr<KvEventPublisher>> create(const KvEventPublisherConfig& config);
  ~KvEventPublisher();  // sends what is queued, then closes the sockets
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Queues one batch (ts: Unix seconds). False when the queue was full (dropped, counted).
  bool publish(std::vector<KvEvent> events, double ts);
  // Adds to stats().engine_seconds (the caller times its own side of publishing).
  void add_engine_seconds(double s);
  [[nodiscard]] KvEventPublisherStats stats() const;

 private:
  struct Batch {
    uint64_t seq = 0;  // assigned when queued, so a dropped batch leaves a gap subscribers see
    double ts = 0;
    std::vector<KvEvent> events;
  };
  struct ReplaySession {
    std::string identity;
    uint64_t next = 0;  // the next seq to send
    double last_progress = 0;
  };
  struct Sockets;
  explicit KvEventPublisher(const KvEventPublisherConfig& config);
  void run();
  void send(Batch b);
  void take_replay_requests();
  void serve_replay_sessions();
  void zap_loop();

  KvEventPublisherConfig config_;
  std::unique_ptr<Sockets> sockets_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  uint64_t next_seq_ = 0;                                // mu_
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // (seq, payload), publisher thread only
  std::vector<ReplaySession> sessions_;                  // publisher thread only
  double replay_tokens_ = 0, replay_refill_at_ = 0;      // the request rate's token bucket
  KvEventPublisherStats stats_;
  std::thread thread_;
  std::thread zap_;  // the CURVE admission handler (with curve keys)
};

}  // namespace kvs
