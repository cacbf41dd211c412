// EngineWorker: runs the single-threaded Engine on its own thread and connects it to the HTTP
// handler threads.
//
//   handler threads --submit()/cancel()/run_on_engine()--> mutex-guarded inbox --> engine thread
//   engine thread --text deltas, finish, usage--> RequestChannel (one per request) --> handler
//
// The engine thread loops: take the inbox (new requests, cancellations, tasks such as a
// /metrics snapshot), run one engine step, and push each sample's new text to its request's
// channel. Tokens become text inside the step (the engine's stop hook, UTF-8 safe), where stop
// strings are found: the match and what follows are cut and the engine ends the sample there
// (finish_reason "stop"), the one place where a sample ends, as for EOS and length. Admission
// control: at most max_in_flight requests are accepted (running + queued). A handler takes an
// AdmissionTicket before it parses or tokenizes anything, so at most max_in_flight requests are
// being parsed or served at once and a refused one costs nothing but the 429.
//
// Usage reports cached_tokens in whole blocks: partial-block reuse happens inside the engine but
// is never visible to a client (it would tell a client the exact length of another request's
// prefix it shares, token by token).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "model/tokenizer.h"
#include "model/utf8_stream_decoder.h"
#include "server/kv_event_publisher.h"
#include "server/logprobs_json.h"
#include "server/metrics.h"

namespace kvs {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  uint32_t max_tokens = 16;
  std::string tenant;      // from the API key ("" without keys)
  std::string cache_salt;  // the client's partition inside its tenant
  int32_t priority = 0;
  uint32_t n = 1;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string route;  // for per-route metrics
};

struct ChoiceDelta {
  uint32_t index = 0;
  std::string text;
  const char* finish_reason = nullptr;  // "stop" / "length" once the sample is done
  // The logprobs of the tokens sampled since the choice's previous delta (when the request asked
  // for them): a token whose text is held back (half a character, a possible stop string) goes
  // out with the delta that carries its text.
  std::vector<TokenLogprobText> logprobs;
};

struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

// The engine thread writes, one handler thread reads.
class RequestChannel {
 public:
  // Waits up to `timeout` for deltas; moves them into *out. Returns true once the request is
  // done and every delta has been taken.
  bool wait(std::vector<ChoiceDelta>* out, std::chrono::milliseconds timeout);
  [[nodiscard]] Usage usage() const;
  // ok, or why the request failed (its code maps to the HTTP status).
  [[nodiscard]] Status error() const;
  // When the first delta (the first token's text) was pushed; unset before.
  [[nodiscard]] std::optional<Clock::time_point> first_delta_at() const;

  // Engine side.
  void push(ChoiceDelta d);
  void finish(const Usage& usage, Status error = Status::ok());

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceDelta> deltas_;
  std::optional<Clock::time_point> first_delta_at_;
  bool done_ = false;
  Usage usage_;
  Status error_;
};

class EngineWorker;

// A reserved place among the max_in_flight requests; given back when destroyed unless
// submit() took it.
class AdmissionTicket {
 public:
  AdmissionTicket() = default;
  AdmissionTicket(AdmissionTicket&& o) noexcept : worker_(o.worker_) { o.worker_ = nullptr; }
  AdmissionTicket& operator=(AdmissionTicket&&) = delete;
  AdmissionTicket(const AdmissionTicket&) = delete;
  ~AdmissionTicket();
  [[nodiscard]] explicit operator bool() const { return worker_ != nullptr; }

 private:
  friend class EngineWorker;
  explicit AdmissionTicket(EngineWorker* w) : worker_(w) {}
  EngineWorker* worker_ = nullptr;
};

struct EngineWorkerConfig {
  uint32_t max_in_flight = 64;  // running + queued requests accepted at once
  bool log_preemptions = true;  // one line per preemption
  // Where those lines go (the server's log, in its format); null = stderr as plain text.
  std::function<void(const std::string&)> log_line;
  // A tenant (cache namespace) that holds no block and runs nothing is forgotten after this
  // long (KvCacheManager::forget_idle_tenants), so distinct salts cannot grow memory forever.
  double tenant_idle_seconds = 600;
  // KV events (engine config kv_events): each step's cache changes go out as one batch.
  KvEventPublisher* kv_events = nullptr;
};

class EngineWorker {
 public:
  EngineWorker(Engine& engine, const Tokenizer& tokenizer, ServerMetrics& metrics,
               const EngineWorkerConfig& config);
  ~EngineWorker();
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  void start();
  void stop();

  // Reserves a place for one request; an empty ticket when max_in_flight are in flight.
  [[nodiscard]] AdmissionTicket try_reserve();
  // Queues a request (already validated), using the ticket's place.
  std::shared_ptr<RequestChannel> submit(AdmissionTicket ticket, GenerationRequest request);
  // Aborts a request (client gone): its sequences stop and their blocks are freed.
  void cancel(const std::shared_ptr<RequestChannel>& channel);
  // Runs fn on the engine thread between steps and waits for it (snapshots for /metrics, /v1/kv).
  void run_on_engine(const std::function<void(Engine&)>& fn);

  [[nodiscard]] uint32_t in_flight() const { return in_flight_.load(); }
  // Grows whenever a request is admitted into the engine or leaves it: a KV view taken before
  // the last change misses a request (KvViewCache takes a new one).
  [[nodiscard]] uint64_t request_changes() const { return request_changes_.load(); }

 private:
  struct Choice {
    SeqId seq{0};
    bool started = false;
    bool done = false;
    std::unique_ptr<Utf8StreamDecoder> decoder;
    std::string text;    // decoded so far (after stop-string cuts)
    size_t emitted = 0;  // bytes of text already pushed
    // Stop strings are looked for only in text decoded once min_tokens tokens exist (as vLLM):
    // the text's length before that token.
    size_t stop_from = 0;
    uint32_t generated = 0;
    uint32_t total_tokens = 0;
    Clock::time_point last_token;
    // Logprobs (when asked for): characters of text decoded so far, where the last sampled
    // token's text began, and the entries not yet pushed.
    uint32_t text_chars = 0;
    uint32_t last_token_offset = 0;
    std::vector<TokenLogprobText> pending_logprobs;
  };
  struct Active {
    std::shared_ptr<RequestChannel> channel;
    GenerationRequest request;
    Clock::time_point arrival;
    bool first_token_seen = false;
    std::vector<Choice> choices;
    uint32_t num_done = 0;
    uint32_t prompt_tokens = 0;
    uint32_t cached_tokens = 0;
    std::string last_reason;
  };
  struct Incoming {
    std::shared_ptr<RequestChannel> channel;
    GenerationRequest request;
    Clock::time_point arrival;
  };

  void loop();
  // This step's prefix-cache changes as one KV event batch (config.kv_events).
  void publish_cache_events();
  void admit(Incoming in);
  // The engine's stop hook: decodes a sampled token into its choice's text; true when a stop
  // string completed (the engine then ends the sample with FinishReason::kStop).
  bool on_sample(const Sequence& s, int32_t token);
  void on_token(const StepOutput& o);
  void emit(Active& a, uint32_t index, bool final_piece, const char* reason);
  void complete_choice(Active& a, uint32_t index, const char* reason);
  void close(uint64_t request_id, const Status& error);
  friend class AdmissionTicket;
  void abort_request(uint64_t request_id);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  ServerMetrics& metrics_;
  EngineWorkerConfig config_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<Incoming> inbox_;
  std::vector<std::shared_ptr<RequestChannel>> cancels_;
  std::vector<std::function<void(Engine&)>> tasks_;
  std::atomic<uint32_t> in_flight_{0};
  std::atomic<uint64_t> request_changes_{0};
  // Engine thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Active>> active_;  // by request (first seq) id
  std::unordered_map<const RequestChannel*, uint64_t> by_channel_;
  Clock::time_point last_tenant_sweep_ = Clock::now();
};

}  // namespace kvs
