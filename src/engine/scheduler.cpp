#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
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

Status check_window_preemption(uint32_t recent_window, PreemptionMode mode) {
  if (recent_window > 0 && mode == PreemptionMode::kSwap)
    return invalid_argument(
        "--kv-recent-window needs --preemption-mode recompute: the window's rows are not swapped");
  return Status::ok();
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
        host_.free(it->second);
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

void Scheduler::queue_tier_evictions(StepPlan& plan) {
  std::vector<EvictedBlock> evicted = cache_.take_tier_evictions();
  if (tiers_ == nullptr) return;  // tier keys for KV events only: nothing goes down
  for (const EvictedBlock& e : evicted) tiers_->plan_store(e.block, e.meta, e.tokens, plan);
}

void Scheduler::queue_cache_output(std::vector<BlockCopy>& copies, StepPlan& plan) {
  queue_tier_evictions(plan);
  for (const BlockCopy& c : copies)
    plan.transfers.push_back({.kind = KvTransferKind::kCopyTokens,
                              .src = c.src.value,
                              .dst = c.dst.value,
                              .num_tokens = c.num_tokens});
  copies.clear();
}

void Scheduler::preempt(Sequence* victim, StepPlan& plan) {
  PreemptionMode mode = PreemptionMode::kRecompute;
  // Every running sequence has all its appended slots committed between steps, so the blocks
  // hold exactly num_computed tokens of KV (no forward pass of this step has run yet).
  const bool swap = config_.preemption_mode == PreemptionMode::kSwap && victim->num_computed > 0 &&
                    cache_.num_committed(victim->id) == victim->num_computed;
  // Only what a later step can read is worth copying (sliding groups keep their window).
  if (swap) cache_.release_out_of_window(victim->id);
  const std::vector<BlockId> blocks = cache_.resident_blocks(victim->id);
  const uint32_t nb = static_cast<uint32_t>(blocks.size());
  if (swap) {
    // The host tier gives back blocks of its share when swap's own is used up.
    if (tiers_ != nullptr && host_.num_free() < nb) tiers_->make_host_room(nb, plan);
    if (auto host = host_.allocate(nb)) {
      for (uint32_t i = 0; i < nb; ++i)
        plan.transfers.push_back(
            {.kind = KvTransferKind::kSwapOut, .src = blocks[i].value, .dst = (*host)[i]});
      swapped_.emplace(victim->id, std::move(*host));
      mode = PreemptionMode::kSwap;
    }
  }
  // Recompute: the victim's full blocks stay in the prefix cache (cached-free), so its
  // re-admission usually reuses most of them. Swap: the kSwapOut transfers queued above read
  // the blocks before any later transfer or the forward pass can reuse them.
  cache_.free(victim->id);
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

std::optional<uint32_t> Scheduler::admit_swapped(Sequence* s, uint32_t budget, StepPlan& plan) {
  const uint32_t n = std::min(budget, s->remaining());
  const std::span<const int32_t> restored_tokens =
      std::span<const int32_t>(s->tokens).first(s->num_computed);
  // All or nothing: the restored blocks and the chunk's, or no change (a half-restored sequence
  // would leave prefix-cache entries whose bytes were never written).
  auto restored = cache_.admit_restored(s->id, restored_tokens, s->cache_salt, n);
  if (!restored.is_ok()) return std::nullopt;
  queue_tier_evictions(plan);  // before the swap-ins overwrite the evicted blocks
  auto it = swapped_.find(s->id);
  KVS_CHECK_MSG(it != swapped_.end(), "swapped sequence without host blocks");
  const std::vector<uint32_t>& host = it->second;
  // admit_restored re-created exactly the blocks swap-out copied, in the same order.
  const std::vector<BlockId>& blocks = *restored;
  KVS_CHECK(blocks.size() == host.size());
  for (size_t i = 0; i < host.size(); ++i)
    plan.transfers.push_back(
        {.kind = KvTransferKind::kSwapIn, .src = host[i], .dst = blocks[i].value});
  // The host blocks may be taken again by a later preemption of this step: its kSwapOut is
  // queued after this kSwapIn, so it overwrites them only after they were read.
  host_.free(host);
  swapped_.erase(it);
  s->swapped = false;
  return n;
}

Scheduler::TierImport Scheduler::import_from_tiers(Sequence* s, const AdmitPlan& ap,
                                                   uint32_t max_cached, uint32_t budget,
                                                   StepPlan& plan) {
  const uint32_t bs = cache_.block_size();
  // Whole blocks before the last prompt token (always recomputed, for its logits) and within
  // what the sequence may reuse.
  const uint32_t max_blocks =
      static_cast<uint32_t>(std::min<uint64_t>(s->tokens.size() - 1, max_cached) / bs);
  const uint32_t first = ap.cached_blocks;
  if (first >= max_blocks) return TierImport::kNone;
  const std::vector<TierBlockMeta> chain = cache_.tier_chain(s->tokens, s->cache_salt, max_blocks);
  const bool give_up = s->tier_wait_start != Clock::time_point{} &&
                       std::chrono::duration<double>(Clock::now() - s->tier_wait_start).count() >=
                           config_.max_tier_wait_seconds;
  const std::span<const TierBlockMeta> rest = std::span(chain).subspan(first);
  const TierPolicy::Found found =
      tiers_->find(rest, std::span<const int32_t>(s->tokens).subspan(uint64_t{first} * bs),
                   prefill_tokens_per_s_, give_up, plan);
  if (found.loading) return TierImport::kLoading;
  const std::vector<TierPolicy::Hit>& hits = found.hits;
  if (hits.empty()) return TierImport::kNone;
  std::vector<TierBlockMeta> metas;
  for (const TierPolicy::Hit& h : hits) metas.push_back(h.meta);
  // Room for the imported blocks and the blocks of the first chunk after them.
  const uint32_t after = static_cast<uint32_t>(s->tokens.size()) - (first + hits.size()) * bs;
  const uint32_t keep_free = (std::min(after, budget) + bs - 1) / bs;
  auto imported = cache_.import_blocks(s->tokens, s->cache_salt, first, metas, keep_free);
  queue_tier_evictions(plan);  // their bytes are read before the loads overwrite the blocks
  if (!imported.is_ok()) return TierImport::kNone;
  tiers_->plan_loads(hits, *imported, plan);
  return imported->empty() ? TierImport::kNone : TierImport::kImported;
}

void Scheduler::plan_completed_blocks(KvTransferPlan& plan) {
  if (tiers_ == nullptr || !tiers_->wants_completed_blocks()) return;
  for (BlockId b : cache_.take_completed_blocks())
    tiers_->plan_completed(b, cache_.tier_meta(b), cache_.cached_tokens_of(b), plan);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  num_loading_ = 0;
  // Write-through (and the remote tier): blocks cached since the last call (a swap-in's) go
  // down now, before anything can evict them.
  plan_completed_blocks(plan);
  std::vector<ScheduledChunk>& out = plan.chunks;
  uint32_t budget = config_.max_num_batched_tokens;
  auto scheduled = [&](const Sequence* s) {
    return std::any_of(out.begin(), out.end(), [&](const ScheduledChunk& c) { return c.seq == s; });
  };
  // Reserves n slots for s, preempting the least important (then newest) running sequence not
  // yet scheduled this step while the pool is full. Returns false when s itself had to go.
  auto reserve = [&](Sequence* s, uint32_t n) {
    for (;;) {
      const bool ok = cache_.append_slots(s->id, n, &copies_).is_ok();
      queue_cache_output(copies_, plan);
      if (ok) return true;
      Sequence* victim = nullptr;
      for (Sequence* r : running_) {
        if (scheduled(r)) continue;
        if (victim == nullptr || admitted_before(victim, r)) victim = r;
      }
      if (victim == nullptr) return false;
      preempt(victim, plan);
      if (victim == s) return false;
    }
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
  for (size_t w = 0; w < waiting_.size() && budget > 0 && running_.size() < config_.max_num_seqs;) {
    Sequence* s = waiting_[w];
    // A request of n samples becomes n running sequences once its prompt is in: it is admitted
    // only when all n fit the cap (each may hold a recent-window slot).
    if (running_.size() + 1 + s->pending_forks > config_.max_num_seqs) break;
    uint32_t n = 0;
    if (s->swapped) {
      const std::optional<uint32_t> admitted = admit_swapped(s, budget, plan);
      if (!admitted) break;
      n = *admitted;
    } else {
      // A scored prompt reuses at most the positions before the ones it scores; with a recent
      // window, at most its window floor.
      uint32_t max_cached = max_cached_tokens(*s, config_.recent_window);
      // The attention sink: a hit needs the first token's rows (quant/attention_sink.h).
      bool sink_refused = false;
      if (cache_.has_attention_sink() && max_cached > 0 &&
          (s->tokens.empty() || !cache_.sink_knows(s->tokens[0]))) {
        sink_refused = cache_.plan_admit(s->tokens, s->cache_salt, max_cached).cached_tokens > 0;
        max_cached = 0;
      }
      AdmitPlan ap = cache_.plan_admit(s->tokens, s->cache_salt, max_cached);
      if (ap.prefix_in_flight) {
        ++w;
        continue;
      }
      if (tiers_ != nullptr) {
        const TierImport got = import_from_tiers(s, ap, max_cached, budget, plan);
        if (got == TierImport::kLoading) {
          if (s->tier_wait_start == Clock::time_point{}) s->tier_wait_start = Clock::now();
          ++num_loading_;
          ++w;
          continue;
        }
        if (got == TierImport::kImported)
          ap = cache_.plan_admit(s->tokens, s->cache_salt, max_cached);
      }
      if (!ap.fits) break;
      // With a recent window, the blocks above the sequence's floor are computed reading it:
      // they are its own, never another sequence's prefix hit.
      const uint32_t cacheable =
          config_.recent_window > 0 ? recent_window_floor(*s, config_.recent_window) : UINT32_MAX;
      auto cached =
          cache_.admit(s->id, s->tokens, s->cache_salt, &copies_, budget, max_cached, cacheable);
      queue_cache_output(copies_, plan);
      if (!cached.is_ok()) break;  // nothing changed, no copy queued
      if (sink_refused) ++num_sink_refused_hits_;
      // A hit's first token's rows come from the sink's table (known: checked above).
      if (cache_.has_attention_sink() && *cached > 0) cache_.adopt_start_rows(s->id, s->tokens[0]);
      s->num_computed = *cached;
      s->tier_wait_start = {};  // a later re-admission (after preemption) may wait again
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
  // Sequences that compute position 0 publish its rows under their first token (after the
  // forward pass, so no hit adopts them before they are written).
  if (cache_.has_attention_sink())
    for (const ScheduledChunk& c : out)
      if (c.seq->num_computed == 0) cache_.publish_start_rows(c.seq->id, c.seq->tokens[0]);
  return plan;
}

}  // namespace kvs
