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
    : labeler_(labeler), source_(std::move(source)), config_(config) {
  if (config_.own_clock) thread_ = std::thread([this] { loop(); });
}

KvStreamHub::~KvStreamHub() { stop(); }

std::shared_ptr<KvSubscription> KvStreamHub::subscribe(const ViewScope& scope) {
  std::lock_guard lock(mu_);
  if (stopping_ || num_subs_ >= config_.max_subscribers) return nullptr;
  auto sub = std::make_shared<KvSubscription>();
  auto same = [&](const std::shared_ptr<Channel>& c) {
    return c->scope.admin == scope.admin && (scope.admin || c->scope.tenant == scope.tenant);
  };
  auto it = std::find_if(channels_.begin(), channels_.end(), same);
  if (it == channels_.end())
    it = channels_.insert(channels_.end(),
                          std::make_shared<Channel>(Channel{
                              .scope = scope, .encoder = KvFrameEncoder(labeler_), .subs = {}}));
  (*it)->subs.push_back(sub);
  ++num_subs_;
  cv_.notify_all();
  return sub;
}

void KvStreamHub::unsubscribe(const std::shared_ptr<KvSubscription>& sub) {
  std::lock_guard lock(mu_);
  for (auto it = channels_.begin(); it != channels_.end(); ++it) {
    auto& subs = (*it)->subs;
    const auto found = std::find(subs.begin(), subs.end(), sub);
    if (found == subs.end()) continue;
    subs.erase(found);
    --num_subs_;
    if (subs.empty()) channels_.erase(it);  // a later subscriber starts from a key frame
    return;
  }
}

void KvStreamHub::stop() {
  std::vector<std::shared_ptr<KvSubscription>> subs;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (const auto& c : channels_) subs.insert(subs.end(), c->subs.begin(), c->subs.end());
    channels_.clear();
    num_subs_ = 0;
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
      cv_.wait(lock, [&] { return stopping_ || num_subs_ > 0; });
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
  return !stopping_ && num_subs_ > 0;
}

void KvStreamHub::tick() {
  if (!watched()) return;
  const std::shared_ptr<const KvView> view = source_.take_view();
  if (!view) return;
  std::vector<std::shared_ptr<Channel>> channels;
  {
    std::lock_guard lock(mu_);
    channels = channels_;
  }
  for (const auto& c : channels) {
    if (c->scope.admin) {
      publish(*c, *view);
    } else {
      publish(*c, scoped_kv_view(*view, c->scope));
    }
  }
}

void KvStreamHub::publish(Channel& channel, const KvView& view) {
  bool want_key = false;
  {
    std::lock_guard lock(mu_);
    for (const auto& s : channel.subs) {
      std::lock_guard sl(s->mu_);
      want_key = want_key || s->need_key_;
    }
  }
  KvFrameEncoder& encoder = channel.encoder;
  const bool with_metrics =
      want_key || config_.metrics_every <= 1 || encoder.frames() % config_.metrics_every == 0;
  const std::string fields = with_metrics ? source_.metrics_fields(view) : std::string();
  KvFrames f = encoder.encode(view, want_key, fields, source_.config_fields);
  const auto delta = std::make_shared<const std::string>("data: " + f.delta + "\n\n");
  const auto key =
      want_key ? std::make_shared<const std::string>("data: " + f.key + "\n\n") : nullptr;
  std::lock_guard lock(mu_);
  for (const auto& s : channel.subs) {
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
