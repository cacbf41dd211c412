// KvViewCache: the one place the server takes KV views (kv_view.h) on the engine thread. Every
// reader (/v1/kv, /metrics, the dashboard stream) gets the latest view if it is younger than
// max_age and no request was admitted or finished since it was taken; else the first reader takes
// a new one while the others wait for it. Polling any of them at any rate, from any number of
// clients, costs the engine thread at most one view per max_age plus one per request admitted or
// finished (docs/security.md measures it against decode speed), and a client that polls after
// its request started or ended sees that request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "server/engine_worker.h"
#include "server/kv_view.h"

namespace kvs {

class KvViewCache {
 public:
  KvViewCache(EngineWorker& worker, std::chrono::milliseconds max_age)
      : worker_(worker), max_age_(max_age) {}

  // The latest view (taken at most max_age ago); nullptr when the engine is stopping.
  [[nodiscard]] std::shared_ptr<const KvView> get();
  // Views taken on the engine thread so far.
  [[nodiscard]] uint64_t views_taken() const;

 private:
  EngineWorker& worker_;
  std::chrono::milliseconds max_age_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool taking_ = false;
  std::shared_ptr<const KvView> latest_;
  std::chrono::steady_clock::time_point taken_at_{};
  uint64_t changes_at_ = 0;  // EngineWorker::request_changes() when the latest was taken
  uint64_t views_taken_ = 0;
};

}  // namespace kvs
