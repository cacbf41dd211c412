#include "server/engine_worker.h"

#include "server/api_keys.h"

#include <algorithm>
#include <cstdio>
#include <future>

namespace kvs {

bool RequestChannel::wait(std::vector<ChoiceDelta>* out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !deltas_.empty(); });
  while (!deltas_.empty()) {
    out->push_back(std::move(deltas_.front()));
    deltas_.pop_front();
  }
  return done_;
}

Usage RequestChannel::usage() const {
  std::lock_guard lock(mu_);
  return usage_;
}

Status RequestChannel::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

void RequestChannel::push(ChoiceDelta d) {
  {
    std::lock_guard lock(mu_);
    if (!first_delta_at_) first_delta_at_ = Clock::now();
    deltas_.push_back(std::move(d));
  }
  cv_.notify_all();
}

std::optional<Clock::time_point> RequestChannel::first_delta_at() const {
  std::lock_guard lock(mu_);
  return first_delta_at_;
}

void RequestChannel::finish(const Usage& usage, Status error) {
  {
    std::lock_guard lock(mu_);
    usage_ = usage;
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

EngineWorker::EngineWorker(Engine& engine, const Tokenizer& tokenizer, ServerMetrics& metrics,
                           const EngineWorkerConfig& config)
    : engine_(engine), tokenizer_(tokenizer), metrics_(metrics), config_(config) {
  engine_.set_stop_hook([this](const Sequence& s, int32_t token) { return on_sample(s, token); });
}

EngineWorker::~EngineWorker() { stop(); }

void EngineWorker::start() {
  thread_ = std::thread([this] { loop(); });
}

void EngineWorker::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

AdmissionTicket::~AdmissionTicket() {
  if (worker_ != nullptr) worker_->in_flight_.fetch_sub(1);
}

AdmissionTicket EngineWorker::try_reserve() {
  if (in_flight_.fetch_add(1) >= config_.max_in_flight) {
    in_flight_.fetch_sub(1);
    return AdmissionTicket();
  }
  return AdmissionTicket(this);
}

std::shared_ptr<RequestChannel> EngineWorker::submit(AdmissionTicket ticket,
                                                     GenerationRequest request) {
  KVS_CHECK_MSG(ticket.worker_ == this, "submit() needs a ticket of this worker");
  ticket.worker_ = nullptr;  // the place now belongs to the request until close()
  auto channel = std::make_shared<RequestChannel>();
  {
    std::lock_guard lock(mu_);
    inbox_.push_back({channel, std::move(request), Clock::now()});
  }
  cv_.notify_all();
  return channel;
}

void EngineWorker::cancel(const std::shared_ptr<RequestChannel>& channel) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(channel);
  }
  cv_.notify_all();
}

void EngineWorker::run_on_engine(const std::function<void(Engine&)>& fn) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    tasks_.push_back([&fn, done](Engine& e) {
      fn(e);
      done->set_value();
    });
  }
  cv_.notify_all();
  f.wait();
}

void EngineWorker::loop() {
  for (;;) {
    std::vector<Incoming> in;
    std::vector<std::shared_ptr<RequestChannel>> cancels;
    std::vector<std::function<void(Engine&)>> tasks;
    {
      std::unique_lock lock(mu_);
      const auto ready = [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty() ||
               engine_.has_unfinished();
      };
      // With KV events, an idle worker still wakes now and then: the disk tier's writer thread
      // changes its index between steps, and those events must not wait for the next request.
      if (config_.kv_events != nullptr)
        cv_.wait_for(lock, std::chrono::milliseconds(100), ready);
      else
        cv_.wait(lock, ready);
      in.swap(inbox_);
      cancels.swap(cancels_);
      tasks.swap(tasks_);
      if (stopping_) {
        for (auto& t : tasks) t(engine_);
        for (auto& i : in) {
          i.channel->finish({}, unavailable("the server is shutting down"));
          in_flight_.fetch_sub(1);
        }
        break;
      }
    }
    for (Incoming& i : in) admit(std::move(i));
    for (const auto& c : cancels) {
      const auto it = by_channel_.find(c.get());
      if (it != by_channel_.end()) abort_request(it->second);
    }
    for (auto& t : tasks) t(engine_);
    publish_cache_events();  // what changed outside a step (the disk tier's writes)
    if (Clock::now() - last_tenant_sweep_ > std::chrono::seconds(1)) {
      last_tenant_sweep_ = Clock::now();
      const double now =
          std::chrono::duration<double>(last_tenant_sweep_.time_since_epoch()).count();
      engine_.forget_idle_tenants(now, config_.tenant_idle_seconds);
    }
    if (!engine_.has_unfinished()) continue;
    const std::vector<StepOutput> outputs = engine_.step();
    publish_cache_events();
    for (const StepOutput& o : outputs) on_token(o);
    if (outputs.empty() && engine_.snapshot().running == 0) {
      // Nothing could be scheduled (e.g. a tenant quota): wait for new input, never spin.
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(5), [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty();
      });
    }
    for (const PreemptionEvent& ev : engine_.take_preemption_events()) {
      if (!config_.log_preemptions) continue;
      char line[160];
      std::snprintf(line, sizeof line, "preempted request %llu (sample %u) mode=%s blocks=%u",
                    static_cast<unsigned long long>(ev.request.value), ev.index,
                    preemption_mode_name(ev.mode), ev.blocks);
      if (config_.log_line)
        config_.log_line(line);
      else
        std::fprintf(stderr, "kvserve: %s\n", line);
    }
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  for (uint64_t id : ids) abort_request(id);
}

void EngineWorker::publish_cache_events() {
  if (config_.kv_events == nullptr) return;
  const auto t0 = Clock::now();
  std::vector<KvEvent> events = kv_events_of(engine_.take_cache_events(), kMediumPool);
  // In the order the step made them: stores into L2 happen as the pool evicts.
  for (KvEvent& e : kv_events_of(engine_.take_host_tier_events(), kMediumHost))
    events.push_back(std::move(e));
  for (KvEvent& e : kv_events_of(engine_.take_disk_tier_events(), kMediumDisk))
    events.push_back(std::move(e));
  if (events.empty()) return;
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  config_.kv_events->publish(std::move(events), ts);
  config_.kv_events->add_engine_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
}

void EngineWorker::admit(Incoming in) {
  const uint32_t n = in.request.n;
  const uint32_t prompt_tokens = static_cast<uint32_t>(in.request.prompt.size());
  SequenceRequest req{.prompt = in.request.prompt,
                      .sampling = in.request.sampling,
                      .max_tokens = in.request.max_tokens,
                      .cache_salt = cache_namespace(in.request.tenant, in.request.cache_salt),
                      .ignore_eos = in.request.ignore_eos,
                      .priority = in.request.priority,
                      .n = n};
  Result<SeqId> id = engine_.add_request(std::move(req));
  if (!id.is_ok()) {
    in.channel->finish({}, id.status());
    in_flight_.fetch_sub(1);
    return;
  }
  auto a = std::make_unique<Active>();
  a->channel = std::move(in.channel);
  a->request = std::move(in.request);
  a->request.prompt.clear();
  a->arrival = in.arrival;
  a->choices.resize(n);
  a->choices[0].seq = *id;
  a->prompt_tokens = prompt_tokens;
  by_channel_[a->channel.get()] = id->value;
  active_.emplace(id->value, std::move(a));
  request_changes_.fetch_add(1);
}

void EngineWorker::emit(Active& a, uint32_t index, bool final_piece, const char* reason) {
  Choice& c = a.choices[index];
  size_t safe = c.text.size();
  if (!final_piece) {
    // Hold back a tail that could still become a stop string.
    for (const std::string& stop : a.request.stop) {
      const size_t max_len = std::min(stop.size() - 1, c.text.size() - c.emitted);
      for (size_t len = max_len; len > 0; --len) {
        if (c.text.compare(c.text.size() - len, len, stop, 0, len) == 0) {
          safe = std::min(safe, c.text.size() - len);
          break;
        }
      }
    }
  }
  if (safe > c.emitted || reason != nullptr) {
    a.channel->push({.index = index,
                     .text = c.text.substr(c.emitted, safe - c.emitted),
                     .finish_reason = reason,
                     .logprobs = std::move(c.pending_logprobs)});
    c.pending_logprobs.clear();
    c.emitted = safe;
  }
}

bool EngineWorker::on_sample(const Sequence& s, int32_t token) {
  // On the engine thread, inside the step: decode the token and look for a stop string, so that
  // a stop ends the sequence in the step, as EOS and length do.
  const uint64_t rid = s.parent.value != 0 ? s.parent.value : s.id.value;
  const auto it = active_.find(rid);
  if (it == active_.end()) return false;
  Active& a = *it->second;
  if (s.index >= a.choices.size()) return false;
  Choice& c = a.choices[s.index];
  if (c.done) return false;
  if (!c.decoder)
    c.decoder = std::make_unique<Utf8StreamDecoder>(tokenizer_, /*skip_special=*/true);
  const size_t before = c.text.size();
  c.text += c.decoder->push(token);
  c.last_token_offset = c.text_chars;
  for (size_t i = before; i < c.text.size(); ++i)
    if ((static_cast<unsigned char>(c.text[i]) & 0xC0) != 0x80) ++c.text_chars;
  if (a.request.stop.empty()) return false;
  if (s.num_generated() < a.request.sampling.min_tokens) {
    c.stop_from = c.text.size();
    return false;
  }
  if (s.num_generated() == a.request.sampling.min_tokens) c.stop_from = before;
  size_t cut = std::string::npos;
  for (const std::string& stop : a.request.stop) {
    // A match may begin in earlier text that is not emitted yet (held back as a possible stop
    // prefix), but not before min_tokens tokens existed.
    const size_t lookback = std::min(c.stop_from, stop.size() - 1);
    const size_t pos = c.text.find(stop, std::max(c.emitted, c.stop_from - lookback));
    if (pos != std::string::npos) cut = std::min(cut, pos);
  }
  if (cut == std::string::npos) return false;
  c.text.resize(cut);  // the match and what follows are cut
  return true;
}

void EngineWorker::on_token(const StepOutput& o) {
  const auto it = active_.find(o.request.value);
  if (it == active_.end()) return;
  Active& a = *it->second;
  if (o.index >= a.choices.size()) return;
  Choice& c = a.choices[o.index];
  if (c.done) return;
  if (!c.started) {
    c.started = true;
    c.seq = o.seq;
  }
  if (!c.decoder)
    c.decoder = std::make_unique<Utf8StreamDecoder>(tokenizer_, /*skip_special=*/true);
  const auto now = Clock::now();
  if (!a.first_token_seen) {
    a.first_token_seen = true;
    a.cached_tokens = o.cached_tokens;  // whole blocks (StepOutput)
    metrics_.observe_ttft(std::chrono::duration<double>(now - a.arrival).count(), a.prompt_tokens);
  } else if (c.generated > 0) {
    metrics_.observe_inter_token(std::chrono::duration<double>(now - c.last_token).count());
  }
  c.last_token = now;
  c.generated = o.generated;
  if (o.logprobs)
    c.pending_logprobs.push_back(token_logprob_text(tokenizer_, *o.logprobs, c.last_token_offset));
  c.total_tokens = a.prompt_tokens + o.generated;
  if (!o.finished) {
    emit(a, o.index, false, nullptr);
    return;
  }
  // EOS, length and stop strings all end the sample in the engine's step.
  if (o.finish != FinishReason::kStop) c.text += c.decoder->flush();
  complete_choice(a, o.index, o.finish == FinishReason::kLength ? "length" : "stop");
  if (a.num_done == a.choices.size()) close(o.request.value, Status::ok());
}

void EngineWorker::complete_choice(Active& a, uint32_t index, const char* reason) {
  Choice& c = a.choices[index];
  emit(a, index, true, reason);
  c.done = true;
  ++a.num_done;
  a.last_reason = reason;
}

void EngineWorker::close(uint64_t rid, const Status& error) {
  const auto it = active_.find(rid);
  if (it == active_.end()) return;
  request_changes_.fetch_add(1);
  Active& a = *it->second;
  Usage u{.prompt_tokens = a.prompt_tokens, .completion_tokens = 0, .cached_tokens = 0};
  u.cached_tokens = a.cached_tokens;
  std::vector<double> fractions;
  const double max_len = std::max<uint32_t>(1, engine_.max_model_len());
  for (const Choice& c : a.choices) {
    u.completion_tokens += c.generated;
    if (c.started) fractions.push_back(c.total_tokens / max_len);
  }
  if (error.is_ok()) {
    metrics_.observe_finished(a.request.route,
                              std::chrono::duration<double>(Clock::now() - a.arrival).count(),
                              u.prompt_tokens, u.cached_tokens, u.completion_tokens, fractions,
                              a.last_reason.empty() ? "stop" : a.last_reason);
  } else {
    metrics_.observe_finished(
        a.request.route, std::chrono::duration<double>(Clock::now() - a.arrival).count(),
        u.prompt_tokens, u.cached_tokens, u.completion_tokens, fractions, "abort");
  }
  a.channel->finish(u, error);
  for (const Choice& c : a.choices) {
    if (c.seq.value == 0) continue;
    engine_.abort(c.seq);  // no-op when finished
    engine_.release(c.seq);
  }
  by_channel_.erase(a.channel.get());
  active_.erase(it);
  in_flight_.fetch_sub(1);
}

void EngineWorker::abort_request(uint64_t rid) {
  const auto it = active_.find(rid);
  if (it == active_.end()) return;
  for (const Choice& c : it->second->choices)
    if (c.seq.value != 0) engine_.abort(c.seq);
  close(rid, cancelled("the request was cancelled"));
}

}  // namespace kvs
