#include "server/kv_stream.h"

#include <algorithm>

namespace kvs {

bool KvSubscription::wait(std::vector<std::shared_ptr<const std::string>>* out,
                          std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return closed_ || !frames_.empty(); });
  while (!frames_.empty()) {
    out->push_back(std::move(frames_.front()));
    frames_.pop_front();
  }
  return !closed_;
}

KvStreamHub::KvStreamHub(const TenantLabeler& labeler, KvStreamSource source, KvStreamConfig config)
    : source_(std::move(source)), config_(config), encoder_(labeler) {
  if (config_.own_clock) thread_ = std::thread([this] { loop(); });
}

KvStreamHub::~KvStreamHub() { stop(); }

std::shared_ptr<KvSubscription> KvStreamHub::subscribe() {
  std::lock_guard lock(mu_);
  if (stopping_ || subs_.size() >= config_.max_subscribers) return nullptr;
  auto sub = std::make_shared<KvSubscription>();
  subs_.push_back(sub);
  cv_.notify_all();
  return sub;
}

void KvStreamHub::unsubscribe(const std::shared_ptr<KvSubscription>& sub) {
  std::lock_guard lock(mu_);
  subs_.erase(std::remove(subs_.begin(), subs_.end(), sub), subs_.end());
}

void KvStreamHub::stop() {
  std::vector<std::shared_ptr<KvSubscription>> subs;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    subs.swap(subs_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (const auto& s : subs) {
    {
      std::lock_guard lock(s->mu_);
      s->closed_ = true;
    }
    s->cv_.notify_all();
  }
}

void KvStreamHub::loop() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next = Clock::now();
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !subs_.empty(); });
      if (stopping_) return;
    }
    // Fixed cadence; after a long engine step, start again from now (no burst of catch-up ticks).
    next = std::max(next + config_.interval, Clock::now());
    tick();
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, next, [&] { return stopping_; });
    if (stopping_) return;
  }
}

bool KvStreamHub::watched() {
  std::lock_guard lock(mu_);
  return !stopping_ && !subs_.empty();
}

void KvStreamHub::tick() {
  if (!watched()) return;
  if (std::optional<KvView> view = source_.take_view()) publish(*view);
}

void KvStreamHub::publish(const KvView& view) {
  bool want_key = false;
  {
    std::lock_guard lock(mu_);
    for (const auto& s : subs_) {
      std::lock_guard sl(s->mu_);
      want_key = want_key || s->need_key_;
    }
  }
  const bool with_metrics =
      want_key || config_.metrics_every <= 1 || encoder_.frames() % config_.metrics_every == 0;
  const std::string fields = with_metrics ? source_.metrics_fields(view) : std::string();
  KvFrames f = encoder_.encode(view, want_key, fields, source_.config_fields);
  const auto delta = std::make_shared<const std::string>("data: " + f.delta + "\n\n");
  const auto key =
      want_key ? std::make_shared<const std::string>("data: " + f.key + "\n\n") : nullptr;
  std::lock_guard lock(mu_);
  for (const auto& s : subs_) {
    {
      std::lock_guard sl(s->mu_);
      if (s->need_key_) {
        if (!key) continue;  // joined after this tick began: its key frame comes next tick
        s->frames_.clear();
        s->frames_.push_back(key);
        s->need_key_ = false;
      } else if (s->frames_.size() >= config_.max_queued_frames) {
        s->frames_.clear();  // too far behind: resynchronise with a key frame next tick
        s->need_key_ = true;
        continue;
      } else {
        s->frames_.push_back(delta);
      }
    }
    s->cv_.notify_all();
  }
}

}  // namespace kvs
