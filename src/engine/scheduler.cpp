#include "engine/scheduler.h"

#include <algorithm>

namespace kvs {

void Scheduler::remove_finished() {
  std::erase_if(running_, [](Sequence* s) { return s->status == SeqStatus::kFinished; });
  std::erase_if(waiting_, [](Sequence* s) { return s->status == SeqStatus::kFinished; });
}

void Scheduler::preempt(KvCacheManager& cache, Sequence* victim) {
  // Recompute preemption: the victim's full blocks stay in the prefix cache (cached-free), so
  // its re-admission usually reuses most of them.
  cache.free(victim->id);
  victim->num_computed = 0;
  victim->cached_tokens = 0;
  victim->status = SeqStatus::kWaiting;
  ++victim->num_preemptions;
  ++num_preemptions_;
  std::erase(running_, victim);
  waiting_.push_front(victim);
}

std::vector<ScheduledChunk> Scheduler::schedule(KvCacheManager& cache,
                                                std::vector<BlockCopy>* copies) {
  std::vector<ScheduledChunk> out;
  uint32_t budget = config_.max_num_batched_tokens;
  // Reserves n slots for s, preempting the newest not-yet-scheduled running sequences when the
  // pool is full. Returns false when s itself had to go.
  auto reserve = [&](Sequence* s, uint32_t n) {
    while (!cache.append_slots(s->id, n, copies).is_ok()) {
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        const bool scheduled = std::any_of(out.begin(), out.end(),
                                           [&](const ScheduledChunk& c) { return c.seq == *it; });
        if (!scheduled) {
          victim = *it;
          break;
        }
      }
      if (victim == nullptr) return false;
      preempt(cache, victim);
      if (victim == s) return false;
    }
    return true;
  };
  // 1. Decodes first (one token each), oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->remaining() != 1) continue;
    if (!reserve(s, 1)) {
      --i;  // running_ shrank at or before i
      continue;
    }
    out.push_back({s, 1});
    --budget;
  }
  // 2. Prefill chunks of running sequences (chunked prefill).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->remaining() <= 1) continue;
    const uint32_t n = std::min(budget, s->remaining());
    if (!reserve(s, n)) {
      --i;
      continue;
    }
    out.push_back({s, n});
    budget -= n;
  }
  // 3. Admit waiting sequences (FCFS) while the budget, the sequence cap and the pool allow.
  while (!waiting_.empty() && budget > 0 && running_.size() < config_.max_num_seqs) {
    Sequence* s = waiting_.front();
    const AdmitPlan plan = cache.plan_admit(s->tokens, s->cache_salt);
    if (!plan.fits) break;
    auto cached = cache.admit(s->id, s->tokens, s->cache_salt, copies);
    if (!cached.is_ok()) break;
    s->num_computed = *cached;
    if (s->num_preemptions == 0) s->cached_tokens = *cached;
    const uint32_t n = std::min(budget, s->remaining());
    if (!cache.append_slots(s->id, n, copies).is_ok()) {
      cache.free(s->id);
      s->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    s->status = SeqStatus::kRunning;
    if (s->first_scheduled == Clock::time_point{}) s->first_scheduled = Clock::now();
    running_.push_back(s);
    out.push_back({s, n});
    budget -= n;
  }
  return out;
}

}  // namespace kvs
