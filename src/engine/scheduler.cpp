#include "engine/scheduler.h"

#include <algorithm>
#include <tuple>

namespace kvs {

const char* preemption_mode_name(PreemptionMode mode) {
  return mode == PreemptionMode::kSwap ? "swap" : "recompute";
}

Result<PreemptionMode> parse_preemption_mode(const std::string& name) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  return invalid_argument("--preemption-mode must be recompute or swap, got '" + name + "'");
}

namespace {
// Admission order: more important (lower number) first, then first come first served.
bool admitted_before(const Sequence* a, const Sequence* b) {
  return std::tie(a->priority, a->order, a->id.value) <
         std::tie(b->priority, b->order, b->id.value);
}
}  // namespace

void Scheduler::add(Sequence* seq) { enqueue_waiting(seq); }

void Scheduler::enqueue_waiting(Sequence* seq) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, admitted_before), seq);
}

void Scheduler::remove_finished() {
  std::erase_if(running_, [](Sequence* s) { return s->status == SeqStatus::kFinished; });
  std::erase_if(waiting_, [this](Sequence* s) {
    if (s->status != SeqStatus::kFinished) return false;
    if (s->swapped) {
      const auto it = swapped_.find(s->id);
      if (it != swapped_.end()) {
        swap_used_ -= it->second.bytes.size();
        swapped_.erase(it);
      }
      s->swapped = false;
    }
    return true;
  });
}

std::vector<PreemptionEvent> Scheduler::take_preemption_events() {
  std::vector<PreemptionEvent> out;
  out.swap(events_);
  return out;
}

void Scheduler::preempt(KvCacheManager& cache, Sequence* victim) {
  const std::span<const BlockId> blocks = cache.block_table(victim->id);
  const uint32_t nb = static_cast<uint32_t>(blocks.size());
  PreemptionMode mode = PreemptionMode::kRecompute;
  if (config_.preemption_mode == PreemptionMode::kSwap && storage_ != nullptr &&
      victim->num_computed > 0) {
    const uint64_t bytes = uint64_t{nb} * storage_->block_bytes();
    // Every running sequence has all its appended slots committed between steps, so the blocks
    // hold exactly num_computed tokens of KV (no forward pass of this step has run yet).
    if (swap_used_ + bytes <= config_.swap_space_bytes &&
        cache.num_committed(victim->id) == victim->num_computed) {
      SwapEntry e;
      e.bytes.resize(bytes);
      e.num_blocks = nb;
      for (uint32_t i = 0; i < nb; ++i)
        storage_->read_block(blocks[i].value, e.bytes.data() + i * storage_->block_bytes());
      swap_used_ += bytes;
      swapped_.emplace(victim->id, std::move(e));
      mode = PreemptionMode::kSwap;
    }
  }
  // Recompute: the victim's full blocks stay in the prefix cache (cached-free), so its
  // re-admission usually reuses most of them.
  cache.free(victim->id);
  if (mode == PreemptionMode::kSwap) {
    victim->swapped = true;
  } else {
    victim->num_computed = 0;
  }
  victim->status = SeqStatus::kWaiting;
  ++victim->num_preemptions;
  ++num_preemptions_[static_cast<int>(mode)];
  events_.push_back({.seq = victim->id,
                     .request = victim->parent.value != 0 ? victim->parent : victim->id,
                     .index = victim->index,
                     .mode = mode,
                     .blocks = nb});
  std::erase(running_, victim);
  enqueue_waiting(victim);
}

bool Scheduler::admit_swapped(KvCacheManager& cache, Sequence* s, uint32_t budget, uint32_t* n,
                              size_t copies_before) {
  const uint32_t bs = cache.block_size();
  *n = std::min(budget, s->remaining());
  const uint64_t tokens_after = uint64_t{s->num_computed} + *n;
  const uint64_t need = (tokens_after + bs - 1) / bs;
  if (need > cache.available_blocks(s->cache_salt)) return false;
  const std::span<const int32_t> restored =
      std::span<const int32_t>(s->tokens).first(s->num_computed);
  if (!cache.admit_restored(s->id, restored, s->cache_salt).is_ok()) return false;
  if (!cache.append_slots(s->id, *n, nullptr).is_ok()) {
    cache.free(s->id);
    return false;
  }
  auto it = swapped_.find(s->id);
  KVS_CHECK_MSG(it != swapped_.end(), "swapped sequence without a swap copy");
  PendingSwapIn p;
  p.copies_before = copies_before;
  p.entry = std::move(it->second);
  swapped_.erase(it);
  const std::span<const BlockId> blocks = cache.block_table(s->id);
  KVS_CHECK(blocks.size() >= p.entry.num_blocks);
  p.blocks.assign(blocks.begin(), blocks.begin() + p.entry.num_blocks);
  pending_swap_ins_.push_back(std::move(p));
  s->swapped = false;
  return true;
}

void Scheduler::apply_copies_and_swap_ins(std::span<const BlockCopy> copies) {
  size_t done = 0;
  auto copy_until = [&](size_t end) {
    for (; done < end; ++done) {
      const BlockCopy& c = copies[done];
      storage_->copy_tokens(c.src.value, c.dst.value, c.num_tokens);
    }
  };
  KVS_CHECK(storage_ != nullptr || (copies.empty() && pending_swap_ins_.empty()));
  for (PendingSwapIn& p : pending_swap_ins_) {
    copy_until(p.copies_before);
    for (size_t i = 0; i < p.blocks.size(); ++i)
      storage_->write_block(p.blocks[i].value, p.entry.bytes.data() + i * storage_->block_bytes());
    swap_used_ -= p.entry.bytes.size();
  }
  copy_until(copies.size());
  pending_swap_ins_.clear();
}

std::vector<ScheduledChunk> Scheduler::schedule(KvCacheManager& cache,
                                                std::vector<BlockCopy>* copies) {
  std::vector<ScheduledChunk> out;
  uint32_t budget = config_.max_num_batched_tokens;
  auto scheduled = [&](const Sequence* s) {
    return std::any_of(out.begin(), out.end(), [&](const ScheduledChunk& c) { return c.seq == s; });
  };
  // Reserves n slots for s, preempting the least important (then newest) running sequence not
  // yet scheduled this step while the pool is full. Returns false when s itself had to go.
  auto reserve = [&](Sequence* s, uint32_t n) {
    while (!cache.append_slots(s->id, n, copies).is_ok()) {
      Sequence* victim = nullptr;
      for (Sequence* r : running_) {
        if (scheduled(r)) continue;
        if (victim == nullptr || admitted_before(victim, r)) victim = r;
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
    if (s->remaining() != 1 || scheduled(s)) continue;
    if (!reserve(s, 1)) {
      i = static_cast<size_t>(-1);  // running_ changed: rescan (scheduled ones are skipped)
      continue;
    }
    out.push_back({s, 1});
    --budget;
  }
  // 2. Prefill chunks of running sequences (chunked prefill).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->remaining() <= 1 || scheduled(s)) continue;
    const uint32_t n = std::min(budget, s->remaining());
    if (!reserve(s, n)) {
      i = static_cast<size_t>(-1);
      continue;
    }
    out.push_back({s, n});
    budget -= n;
  }
  // 3. Admit waiting sequences in (priority, FCFS) order while the budget, the sequence cap and
  // the pool allow; a sequence that does not fit blocks the rest (no overtaking). One whose next
  // prompt block is being computed by a running sequence waits for that block to be committed
  // (then it is a prefix hit, not a second private copy); later ones may pass it meanwhile.
  for (size_t w = 0;
       w < waiting_.size() && budget > 0 && running_.size() < config_.max_num_seqs;) {
    Sequence* s = waiting_[w];
    uint32_t n = 0;
    if (s->swapped) {
      if (!admit_swapped(cache, s, budget, &n, copies->size())) break;
    } else {
      const AdmitPlan plan = cache.plan_admit(s->tokens, s->cache_salt);
      if (plan.prefix_in_flight) {
        ++w;
        continue;
      }
      if (!plan.fits) break;
      auto cached = cache.admit(s->id, s->tokens, s->cache_salt, copies, budget);
      if (!cached.is_ok()) break;  // nothing changed, no copy queued
      s->num_computed = *cached;
      if (s->num_preemptions == 0) s->cached_tokens = std::min(*cached, s->prompt_len);
      n = std::min(budget, s->remaining());
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    s->status = SeqStatus::kRunning;
    if (s->first_scheduled == Clock::time_point{}) s->first_scheduled = Clock::now();
    running_.push_back(s);
    out.push_back({s, n});
    budget -= n;
  }
  return out;
}

}  // namespace kvs
