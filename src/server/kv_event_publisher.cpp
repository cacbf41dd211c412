#include "server/kv_event_publisher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <zmq.hpp>
#include <zmq_addon.hpp>

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

double mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Malformed replay requests are logged, a few times only (a client can send any number).
constexpr uint64_t kMaxLoggedBadRequests = 8;
// Replay messages sent per session per pass, so that sessions take turns.
constexpr int kReplayBurst = 256;
// The largest message a client may send: a replay request is at most 8 + framing bytes, a
// subscription a topic. Larger ones close the connection (ZMQ_MAXMSGSIZE).
constexpr int64_t kMaxIncomingBytes = 1024;
constexpr size_t kZ85KeyChars = 40;

bool decode_z85_key(const std::string& z85, uint8_t out[32]) {
  if (z85.size() != kZ85KeyChars) return false;
  return zmq_z85_decode(out, z85.c_str()) != nullptr;
}

}  // namespace

Status check_event_endpoint(const std::string& endpoint, const char* flag, bool allow_remote) {
  if (endpoint.rfind("ipc://", 0) == 0 && endpoint.size() > 6) return Status::ok();
  if (endpoint.rfind("tcp://", 0) != 0)
    return invalid_argument(std::string(flag) + " " + endpoint +
                            ": expected tcp://HOST:PORT or ipc://PATH");
  const std::string rest = endpoint.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 == rest.size())
    return invalid_argument(std::string(flag) + " " + endpoint + ": expected tcp://HOST:PORT");
  const std::string host = rest.substr(0, colon);
  const bool loopback =
      host == "localhost" || host == "[::1]" || host == "::1" || host.rfind("127.", 0) == 0;
  if (loopback || allow_remote) return Status::ok();
  return invalid_argument(std::string(flag) + " " + endpoint + " binds '" + host +
                          "', reachable from other machines: KV events carry every tenant's "
                          "block hashes and token ids. Bind 127.0.0.1, or give "
                          "--kv-events-allow-remote (with --kv-events-curve-secret-file and "
                          "--kv-events-curve-clients to authenticate subscribers)");
}

Result<std::vector<std::string>> read_curve_keys(const std::string& path, bool secret) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return invalid_argument(path + ": " + std::strerror(errno));
  struct stat st {};
  std::string text;
  Status bad = Status::ok();
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    bad = invalid_argument(path + " is not a regular file");
  } else if (secret && st.st_uid != ::geteuid()) {
    bad = invalid_argument(path + " is not owned by this user: a secret key must be the server's");
  } else if (secret && (st.st_mode & 077) != 0) {
    bad = invalid_argument(path + " may be read by others: run chmod 600 on it");
  } else if (st.st_size > (1 << 20)) {
    bad = invalid_argument(path + " is larger than 1 MiB");
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    if (::read(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      bad = io_error(path + ": cannot read it");
  }
  ::close(fd);
  if (!bad.is_ok()) return bad;
  std::vector<std::string> keys;
  size_t line_no = 0, at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    line = line.substr(first);
    uint8_t raw[32];
    if (!decode_z85_key(line, raw))
      return invalid_argument(path + " line " + std::to_string(line_no) +
                              ": not a CURVE key (40 Z85 characters)");
    keys.push_back(line);
  }
  if (keys.empty()) return invalid_argument(path + ": no key");
  if (secret && keys.size() != 1) return invalid_argument(path + ": one secret key expected");
  return keys;
}

Result<std::pair<std::string, std::string>> curve_keypair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return unimplemented("this libzmq has no CURVE support (zmq_has(\"curve\") is false)");
  return std::make_pair(std::string(pub), std::string(sec));
}

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
  std::unique_ptr<zmq::socket_t> zap;  // REP on inproc://zeromq.zap.01 (CURVE admission)
  std::set<std::string> admitted;      // client public keys, 32 raw bytes each
  std::atomic<bool> zap_stop{false};
};

KvEventPublisher::KvEventPublisher(const KvEventPublisherConfig& config) : config_(config) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::create(
    const KvEventPublisherConfig& config) {
  if (config.endpoint.empty()) return invalid_argument("--kv-events-endpoint is empty");
  KVS_RETURN_IF_ERROR(
      check_event_endpoint(config.endpoint, "--kv-events-endpoint", config.allow_remote));
  if (!config.replay_endpoint.empty())
    KVS_RETURN_IF_ERROR(check_event_endpoint(config.replay_endpoint, "--kv-events-replay-endpoint",
                                             config.allow_remote));
  const bool curve = !config.curve_secret_key.empty();
  if (curve != !config.curve_client_keys.empty())
    return invalid_argument(
        "--kv-events-curve-secret-file and --kv-events-curve-clients go together (the server's "
        "key, and the subscribers it admits)");
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config));
  p->sockets_ = std::make_unique<Sockets>();
  Sockets& s = *p->sockets_;
  uint8_t secret_raw[32];
  if (curve) {
    if (!zmq_has("curve")) return unimplemented("this libzmq has no CURVE support");
    if (!decode_z85_key(config.curve_secret_key, secret_raw))
      return invalid_argument("--kv-events-curve-secret-file: not a CURVE secret key");
    for (const std::string& k : config.curve_client_keys) {
      uint8_t raw[32];
      if (!decode_z85_key(k, raw))
        return invalid_argument("--kv-events-curve-clients: not a CURVE public key: " + k);
      s.admitted.emplace(reinterpret_cast<const char*>(raw), 32);
    }
    // The ZAP handler is bound before any socket can take a connection.
    s.zap = std::make_unique<zmq::socket_t>(s.context, zmq::socket_type::rep);
    s.zap->set(zmq::sockopt::linger, 0);
    s.zap->bind("inproc://zeromq.zap.01");
  }
  const auto secure = [&](zmq::socket_t& sock) {
    sock.set(zmq::sockopt::maxmsgsize, kMaxIncomingBytes);
    if (!curve) return;
    sock.set(zmq::sockopt::zap_domain, "kvserve");
    sock.set(zmq::sockopt::curve_server, true);
    sock.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(secret_raw, 32));
  };
  try {
    s.pub.set(zmq::sockopt::sndhwm, config.pub_hwm);
    s.pub.set(zmq::sockopt::linger, 1000);
    secure(s.pub);
    s.pub.bind(config.endpoint);
  } catch (const zmq::error_t& e) {
    return invalid_argument("--kv-events-endpoint " + config.endpoint + ": " + e.what());
  }
  if (!config.replay_endpoint.empty()) {
    try {
      s.replay = std::make_unique<zmq::socket_t>(s.context, zmq::socket_type::router);
      s.replay->set(zmq::sockopt::linger, 0);
      // A bounded pipe per requester; a full pipe makes the send fail (EAGAIN) instead of
      // dropping silently, so a replay session waits for its reader, never buffers without
      // bound, and never loses its end marker.
      s.replay->set(zmq::sockopt::sndhwm, config.replay_hwm);
      s.replay->set(zmq::sockopt::router_mandatory, true);
      secure(*s.replay);
      s.replay->bind(config.replay_endpoint);
    } catch (const zmq::error_t& e) {
      return invalid_argument("--kv-events-replay-endpoint " + config.replay_endpoint + ": " +
                              e.what());
    }
  }
  p->replay_tokens_ = std::max(1.0, config.max_replay_requests_per_s);
  p->replay_refill_at_ = mono_now();
  p->queue_.push_back({p->next_seq_++, unix_now(), {KvEvent{.kind = KvEvent::Kind::kAllCleared}}});
  if (curve) p->zap_ = std::thread([q = p.get()] { q->zap_loop(); });
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
  if (sockets_) sockets_->zap_stop = true;
  if (zap_.joinable()) zap_.join();
}

bool KvEventPublisher::publish(std::vector<KvEvent> events, double ts) {
  if (!config_.token_ids)
    for (KvEvent& e : events) e.token_ids.clear();
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

void KvEventPublisher::zap_loop() {
  // ZAP (RFC 27): [version, request id, domain, address, identity, mechanism, credentials...].
  zmq::socket_t& zap = *sockets_->zap;
  while (!sockets_->zap_stop) {
    zmq::pollitem_t item{zap.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    std::vector<zmq::message_t> f;
    if (!zmq::recv_multipart(zap, std::back_inserter(f), zmq::recv_flags::dontwait)) continue;
    const bool ok = f.size() >= 7 && f[5].to_string() == "CURVE" && f[6].size() == 32 &&
                    sockets_->admitted.contains(f[6].to_string());
    std::vector<zmq::const_buffer> reply = {
        zmq::str_buffer("1.0"),
        zmq::buffer(f.size() > 1 ? f[1].data() : nullptr, f.size() > 1 ? f[1].size() : 0),
        ok ? zmq::str_buffer("200") : zmq::str_buffer("400"),
        ok ? zmq::str_buffer("OK") : zmq::str_buffer("not an admitted client key"),
        zmq::str_buffer(""),
        zmq::str_buffer("")};
    try {
      zmq::send_multipart(zap, reply);
    } catch (const zmq::error_t&) {
    }
  }
  zap.close();
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

void KvEventPublisher::take_replay_requests() {
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
    bool refused = false;
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
    // The request rate: a token bucket of max_replay_requests_per_s.
    const double now = mono_now();
    const double rate = std::max(1e-3, config_.max_replay_requests_per_s);
    replay_tokens_ =
        std::min(std::max(1.0, rate), replay_tokens_ + (now - replay_refill_at_) * rate);
    replay_refill_at_ = now;
    uint64_t start = 0;
    const auto* b = static_cast<const uint8_t*>(frames[2].data());
    for (size_t i = 0; i < frames[2].size(); ++i) start = (start << 8) | b[i];
    const std::string identity = frames[0].to_string();
    auto it = std::find_if(sessions_.begin(), sessions_.end(),
                           [&](const ReplaySession& s) { return s.identity == identity; });
    if (replay_tokens_ < 1) {
      refused = true;
    } else if (it != sessions_.end()) {
      replay_tokens_ -= 1;
      it->next = start;  // a new request from the same requester restarts its session
      it->last_progress = now;
    } else if (sessions_.size() >= config_.max_replay_sessions) {
      refused = true;
    } else {
      replay_tokens_ -= 1;
      sessions_.push_back({.identity = identity, .next = start, .last_progress = now});
    }
    if (refused) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.replay_requests_refused;
    }
  }
}

void KvEventPublisher::serve_replay_sessions() {
  zmq::socket_t& r = *sockets_->replay;
  const double now = mono_now();
  uint64_t dropped = 0;
  // Sends one message; false when the requester's pipe is full (try later). Throws when the
  // requester is gone (ROUTER_MANDATORY: EHOSTUNREACH).
  const auto reply = [&](const std::string& identity, const std::string& topic,
                         const std::string& seq, const std::string& payload) {
    const zmq::send_result_t first =
        r.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    if (!first) return false;
    r.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    r.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    r.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    r.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    return true;
  };
  for (size_t i = 0; i < sessions_.size();) {
    ReplaySession& s = sessions_[i];
    bool done = false, gone = false;
    try {
      auto it = std::lower_bound(
          buffer_.begin(), buffer_.end(), s.next,
          [](const std::pair<uint64_t, std::string>& e, uint64_t seq) { return e.first < seq; });
      int sent = 0;
      for (; it != buffer_.end() && sent < kReplayBurst; ++it, ++sent) {
        if (!reply(s.identity, config_.topic, seq_bytes(it->first), it->second)) break;
        s.next = it->first + 1;
        s.last_progress = now;
      }
      if (it == buffer_.end() && reply(s.identity, "", std::string(8, '\xff'), "")) done = true;
    } catch (const zmq::error_t&) {
      gone = true;  // the requester disconnected
    }
    if (!done && !gone && now - s.last_progress > config_.replay_idle_seconds) {
      gone = true;  // it stopped reading
      ++dropped;
    }
    if (done || gone) {
      sessions_.erase(sessions_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  if (dropped > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.replay_sessions_dropped += dropped;
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
    if (sockets_->replay) {
      take_replay_requests();
      serve_replay_sessions();
    }
    if (stopping) return;
  }
}

}  // namespace kvs
