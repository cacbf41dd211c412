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
// publish() never blocks the engine: batches go through a bounded queue to the publisher thread,
// which encodes and sends them and keeps the last `buffer_batches` for replay; a batch that finds
// the queue full is dropped and counted (subscribers see the gap in seq).
#pragma once

#include <atomic>
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
};

struct KvEventPublisherStats {
  uint64_t batches_published = 0;
  uint64_t events_published = 0;
  uint64_t batches_dropped = 0;  // queue full
  uint64_t replay_requests = 0;
  uint64_t bad_replay_requests = 0;
  double engine_seconds = 0;     // engine-thread time handing batches over (what a step pays)
  double publisher_seconds = 0;  // the publisher thread's time encoding and sending
};

class KvEventPublisher {
 public:
  // Binds the sockets (an error if an endpoint is malformed or taken) and starts the thread. The
  // first batch (seq 0) is AllBlocksCleared: a subscriber learns that this replica's cache
  // starts empty.
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
  struct Sockets;
  explicit KvEventPublisher(const KvEventPublisherConfig& config);
  void run();
  void send(Batch b);
  void serve_replay();

  KvEventPublisherConfig config_;
  std::unique_ptr<Sockets> sockets_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool stop_ = false;
  uint64_t next_seq_ = 0;                                // mu_
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // (seq, payload), publisher thread only
  KvEventPublisherStats stats_;
  std::thread thread_;
};

}  // namespace kvs
