// KvStreamHub: the publisher behind GET /v1/kv/stream. One thread, running only while someone
// watches, takes one KvView per tick (from the server's KvViewCache: on the engine thread at most
// once per its interval), and encodes it once per viewer scope (KvFrameEncoder: the changed cells
// as runs, changed sequences, counters): every admin shares one encoding, and each tenant that
// watches gets the view scoped to it (kv_view.h: its own requests, everyone else as "other").
//
//   tick (interval) --take_view()--> KvView --scoped_kv_view--> encoder per scope --> subscribers
//
// A new subscriber gets a key frame (the whole picture) at the next tick, then deltas. A
// subscriber that falls more than max_queued_frames behind (a slow client) has its queue
// dropped and gets a key frame again, so memory per subscriber is bounded and the page always
// converges. The update rate is at most 1 / interval, and at most one per engine step (the view
// can only be taken between steps). Frames carry the chart data every metrics_every ticks (and
// on key frames).
//
// A tick is tick(): the publisher thread is only a clock that calls it every interval while
// someone watches. With own_clock = false there is no thread and the owner calls tick() itself
// (the unit tests, which then know exactly which views became which frames).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/kv_frame.h"
#include "server/kv_view.h"

namespace kvs {

struct KvStreamConfig {
  std::chrono::milliseconds interval{100};
  uint32_t max_subscribers = 4;
  size_t max_queued_frames = 16;
  uint32_t metrics_every = 5;
  bool own_clock = true;  // false: no publisher thread; the owner calls tick()
};

struct KvStreamSource {
  // The latest view (KvViewCache::get); nullptr when the engine is stopping.
  std::function<std::shared_ptr<const KvView>()> take_view;
  // `"metrics":{...}` for a (scoped) view (chart data), added every metrics_every ticks.
  std::function<std::string(const KvView&)> metrics_fields;
  // `"config":{...}`, added to key frames.
  std::string config_fields;
};

// One subscriber's queue of SSE events ("data: {...}\n\n").
class KvSubscription {
 public:
  // Waits up to `timeout` for frames and moves them into *out. Returns false once the hub has
  // stopped (after the last frame was taken).
  bool wait(std::vector<std::shared_ptr<const std::string>>* out,
            std::chrono::milliseconds timeout);

 private:
  friend class KvStreamHub;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const std::string>> frames_;
  bool need_key_ = true;
  bool closed_ = false;
};

class KvStreamHub {
 public:
  KvStreamHub(const TenantLabeler& labeler, KvStreamSource source, KvStreamConfig config);
  ~KvStreamHub();
  KvStreamHub(const KvStreamHub&) = delete;
  KvStreamHub& operator=(const KvStreamHub&) = delete;

  // nullptr when max_subscribers are watching or the hub has stopped. The subscriber sees views
  // scoped to `scope` (an admin sees everything).
  [[nodiscard]] std::shared_ptr<KvSubscription> subscribe(const ViewScope& scope = ViewScope{
                                                              .admin = true});
  void unsubscribe(const std::shared_ptr<KvSubscription>& sub);
  // One tick: with at least one subscriber, takes one view, encodes it once (frame number =
  // views taken so far) and queues that frame for every subscriber (a key frame for those that
  // need one). Nothing when nobody watches or the hub has stopped. One caller at a time: the
  // publisher thread, or the owner when own_clock is false.
  void tick();
  // Stops the publisher; every subscription's wait() then returns false. Idempotent.
  void stop();

  [[nodiscard]] const KvStreamConfig& config() const { return config_; }

 private:
  // The subscribers of one scope and their encoder (the encoder: tick caller only).
  struct Channel {
    ViewScope scope;
    KvFrameEncoder encoder;
    std::vector<std::shared_ptr<KvSubscription>> subs;  // mu_
  };
  void loop();
  void publish(Channel& channel, const KvView& view);
  [[nodiscard]] bool watched();

  const TenantLabeler& labeler_;
  KvStreamSource source_;
  KvStreamConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Channel>> channels_;  // mu_
  size_t num_subs_ = 0;                             // mu_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvs
