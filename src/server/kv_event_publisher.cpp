#include "server/kv_event_publisher.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <cstdio>

namespace kvs {

namespace {

std::string seq_bytes(uint64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
  return out;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Malformed replay requests are logged, a few times only (a client can send any number).
constexpr uint64_t kMaxLoggedBadRequests = 8;

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
};

KvEventPublisher::KvEventPublisher(const KvEventPublisherConfig& config) : config_(config) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::create(
    const KvEventPublisherConfig& config) {
  if (config.endpoint.empty()) return invalid_argument("--kv-events-endpoint is empty");
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config));
  p->sockets_ = std::make_unique<Sockets>();
  Sockets& s = *p->sockets_;
  try {
    s.pub.set(zmq::sockopt::sndhwm, 100000);
    s.pub.set(zmq::sockopt::linger, 1000);
    s.pub.bind(config.endpoint);
  } catch (const zmq::error_t& e) {
    return invalid_argument("--kv-events-endpoint " + config.endpoint + ": " + e.what());
  }
  if (!config.replay_endpoint.empty()) {
    try {
      s.replay = std::make_unique<zmq::socket_t>(s.context, zmq::socket_type::router);
      s.replay->set(zmq::sockopt::linger, 0);
      // A replay is up to buffer_batches messages at once: no high-water mark may cut it short
      // (and drop the end marker).
      s.replay->set(zmq::sockopt::sndhwm, 0);
      s.replay->bind(config.replay_endpoint);
    } catch (const zmq::error_t& e) {
      return invalid_argument("--kv-events-replay-endpoint " + config.replay_endpoint + ": " +
                              e.what());
    }
  }
  p->queue_.push_back({p->next_seq_++, unix_now(), {KvEvent{.kind = KvEvent::Kind::kAllCleared}}});
  p->thread_ = std::thread([q = p.get()] { q->run(); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool KvEventPublisher::publish(std::vector<KvEvent> events, double ts) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = next_seq_++;
    if (queue_.size() >= config_.max_queued_batches) {
      ++stats_.batches_dropped;
      return false;
    }
    queue_.push_back({seq, ts, std::move(events)});
  }
  cv_.notify_one();
  return true;
}

void KvEventPublisher::add_engine_seconds(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.engine_seconds += s;
}

KvEventPublisherStats KvEventPublisher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KvEventPublisher::send(Batch b) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string payload =
      encode_kv_event_batch(b.ts, b.events, config_.block_size, config_.data_parallel_rank);
  const uint64_t seq = b.seq;
  const std::string seqb = seq_bytes(seq);
  zmq::socket_t& pub = sockets_->pub;
  // PUB never blocks: at the high-water mark libzmq drops for the slow subscriber.
  pub.send(zmq::buffer(config_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub.send(zmq::buffer(seqb), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  buffer_.emplace_back(seq, payload);
  while (buffer_.size() > config_.buffer_batches) buffer_.pop_front();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.batches_published;
  stats_.events_published += b.events.size();
  stats_.publisher_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void KvEventPublisher::serve_replay() {
  zmq::socket_t& r = *sockets_->replay;
  for (;;) {
    std::vector<zmq::message_t> frames;
    std::optional<size_t> n;
    try {
      n = zmq::recv_multipart(r, std::back_inserter(frames), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (!n) return;
    const bool ok = frames.size() == 3 && frames[1].size() == 0 && frames[2].size() >= 1 &&
                    frames[2].size() <= 8;
    uint64_t bad = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.replay_requests;
      if (!ok) bad = ++stats_.bad_replay_requests;
    }
    if (!ok) {
      if (bad <= kMaxLoggedBadRequests)
        std::fprintf(stderr,
                     "kvserve: ignored a malformed KV events replay request (%zu frames; expected "
                     "[identity, \"\", start seq])\n",
                     frames.size());
      continue;
    }
    uint64_t start = 0;
    const auto* b = static_cast<const uint8_t*>(frames[2].data());
    for (size_t i = 0; i < frames[2].size(); ++i) start = (start << 8) | b[i];
    const std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
    const auto reply = [&](const std::string& topic, const std::string& seq,
                           const std::string& payload) {
      // ROUTER drops (never blocks) what it cannot route; the client simply asks again.
      r.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      r.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      r.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      r.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      r.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    };
    try {
      for (const auto& [seq, payload] : buffer_)
        if (seq >= start) reply(config_.topic, seq_bytes(seq), payload);
      reply("", std::string(8, '\xff'), "");
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "kvserve: KV events replay: %s\n", e.what());
    }
  }
}

void KvEventPublisher::run() {
  for (;;) {
    std::deque<Batch> batches;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wake for batches, or every few ms to answer replay requests.
      cv_.wait_for(lock, std::chrono::milliseconds(sockets_->replay ? 5 : 100),
                   [&] { return stop_ || !queue_.empty(); });
      batches.swap(queue_);
      stopping = stop_;
    }
    try {
      for (Batch& b : batches) send(std::move(b));
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "kvserve: KV events publish: %s\n", e.what());
    }
    if (sockets_->replay) serve_replay();
    if (stopping) return;
  }
}

}  // namespace kvs
