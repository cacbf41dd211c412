#include "server/kv_view_cache.h"

namespace kvs {

std::shared_ptr<const KvView> KvViewCache::get() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (latest_ && std::chrono::steady_clock::now() - taken_at_ < max_age_ &&
        worker_.request_changes() == changes_at_)
      return latest_;
    if (!taking_) break;
    cv_.wait(lock, [&] { return !taking_; });  // another reader is taking it: share that one
  }
  taking_ = true;
  const uint64_t changes = worker_.request_changes();  // read before the view is taken
  lock.unlock();
  std::shared_ptr<KvView> view;
  worker_.run_on_engine([&](Engine& e) { view = std::make_shared<KvView>(take_kv_view(e)); });
  lock.lock();
  taking_ = false;
  if (view) {
    latest_ = std::move(view);
    taken_at_ = std::chrono::steady_clock::now();
    changes_at_ = changes;
    ++views_taken_;
  }
  cv_.notify_all();
  return latest_;
}

uint64_t KvViewCache::views_taken() const {
  std::lock_guard lock(mu_);
  return views_taken_;
}

}  // namespace kvs
