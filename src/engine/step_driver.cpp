#include "engine/step_driver.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/byte_size.h"

namespace kvs {

void StepBackend::score(size_t, Sequence&, uint32_t, uint32_t) {
  KVS_CHECK_MSG(false, "this backend scores no prompt");
}

KvCacheConfig pool_cache_config(const KvPoolPlan& pool, bool enable_prefix_caching,
                                uint64_t model_fingerprint, uint64_t hash_seed) {
  return KvCacheConfig{
      .num_blocks = pool.num_blocks,
      .block_size = pool.block_size,
      .group_windows = pool.groups.windows,
      .enable_prefix_caching = enable_prefix_caching,
      .model_fingerprint = model_fingerprint,
      .hash_seed = hash_seed,
      .k_dtype = pool.unit.k_dtype,
      .v_dtype = pool.unit.v_dtype,
      .recent_window_slots = pool.recent_window_slots,
      .attention_sink_entries = pool.attention_sink ? pool.recent_window_slots : 0};
}

Result<uint32_t> swap_host_blocks(PreemptionMode mode, uint64_t swap_space, uint64_t block_bytes) {
  KVS_CHECK_MSG(block_bytes > 0, "swap_host_blocks of an empty block");
  if (mode != PreemptionMode::kSwap) return uint32_t{0};
  const uint64_t blocks = std::min<uint64_t>(swap_space / block_bytes, kMaxPoolBlocks);
  if (blocks == 0)
    return invalid_argument("--preemption-mode swap needs --swap-space of at least one block (" +
                            format_thousands(block_bytes) + " B)");
  return static_cast<uint32_t>(blocks);
}

StepDriver::StepDriver(const StepDriverConfig& config)
    : config_(config),
      cache_(config.cache),
      host_(config.host_blocks),
      scheduler_(config.scheduler, cache_, host_) {}

Result<SeqId> StepDriver::add(SequenceRequest req) {
  if (req.prompt.empty()) return invalid_argument("the prompt is empty");
  if (req.score_from) {
    if (req.max_tokens != 0 || req.n != 1)
      return invalid_argument("a scored prompt generates nothing: max_tokens 0 and n 1");
    if (req.prompt.size() < 2) return invalid_argument("a scored prompt needs two tokens");
  } else if (req.max_tokens == 0) {
    return invalid_argument("max_tokens must be at least 1");
  }
  for (int32_t id : req.prompt)
    if (id < 0 || (config_.vocab_size != 0 && static_cast<uint32_t>(id) >= config_.vocab_size))
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
  KVS_RETURN_IF_ERROR(req.sampling.validate());
  if (req.n < 1 || req.n > kMaxSamplesPerRequest)
    return invalid_argument("n must be between 1 and " + std::to_string(kMaxSamplesPerRequest) +
                            ", got " + std::to_string(req.n));
  if (req.n > config_.scheduler.max_num_seqs)
    return invalid_argument("n (" + std::to_string(req.n) + ") exceeds --max-num-seqs (" +
                            std::to_string(config_.scheduler.max_num_seqs) +
                            "): every sample is a running sequence");
  const uint64_t total = req.prompt.size() + uint64_t{req.max_tokens};
  const uint32_t max_len = config_.max_model_len;
  if (req.prompt.size() > max_len)
    return invalid_argument("the prompt has " + std::to_string(req.prompt.size()) +
                            " tokens, more than the maximum model length " +
                            std::to_string(max_len));
  if (total > max_len)
    return invalid_argument("prompt (" + std::to_string(req.prompt.size()) +
                            " tokens) + max_tokens (" + std::to_string(req.max_tokens) +
                            ") exceeds the maximum model length " + std::to_string(max_len));
  // The most blocks the request can hold (every token prefilled in the step's chunks; a sliding
  // group holds only its window + a chunk): it must fit the pool when it runs alone.
  if (const uint64_t need =
          sequence_footprint(config_.pool, total, config_.scheduler.max_num_batched_tokens).blocks;
      need > config_.pool.num_blocks)
    return resource_exhausted(
        "prompt + max_tokens = " + std::to_string(total) + " tokens need up to " +
        std::to_string(need) + " blocks, more than the KV pool's " +
        std::to_string(config_.pool.num_blocks) + " (raise --kv-cache-memory)");
  const SeqId id{next_id_++};
  auto seq = std::make_unique<Sequence>(id, std::move(req));
  scheduler_.add(seq.get());
  seqs_.emplace(id.value, std::move(seq));
  return id;
}

const Sequence& StepDriver::sequence(SeqId id) const {
  auto it = seqs_.find(id.value);
  KVS_CHECK_MSG(it != seqs_.end(), "unknown sequence");
  return *it->second;
}

void StepDriver::finish(Sequence& s, FinishReason reason) {
  if (s.status == SeqStatus::kRunning) cache_.free(s.id);
  s.status = SeqStatus::kFinished;
  s.finish = reason;
  s.finished = Clock::now();
}

void StepDriver::abort(SeqId id) {
  auto it = seqs_.find(id.value);
  if (it == seqs_.end() || it->second->status == SeqStatus::kFinished) return;
  finish(*it->second, FinishReason::kAbort);
  scheduler_.remove_finished();
}

void StepDriver::release(SeqId id) {
  auto it = seqs_.find(id.value);
  if (it == seqs_.end()) return;
  KVS_CHECK_MSG(it->second->status == SeqStatus::kFinished, "release() of a live sequence");
  seqs_.erase(it);
}

void StepDriver::fork_children(Sequence& parent) {
  for (uint32_t i = 1; i <= parent.pending_forks; ++i) {
    const SeqId id{next_id_++};
    SequenceRequest req{.prompt = parent.tokens,
                        .sampling = parent.sampling,
                        .max_tokens = parent.max_tokens,
                        .cache_salt = parent.cache_salt,
                        .ignore_eos = parent.ignore_eos,
                        .priority = parent.priority};
    if (req.sampling.seed) req.sampling.seed = *req.sampling.seed + i;
    auto child = std::make_unique<Sequence>(id, std::move(req));
    const Status st = cache_.fork(parent.id, id);
    KVS_CHECK_MSG(st.is_ok(), st.message().c_str());
    child->prompt_len = parent.prompt_len;
    child->num_computed = parent.num_computed;
    child->cached_tokens = parent.cached_tokens;
    child->order = parent.order;
    child->parent = parent.id;
    child->index = i;
    child->arrival = parent.arrival;
    child->first_scheduled = parent.first_scheduled;
    child->status = SeqStatus::kRunning;
    scheduler_.add_running(child.get());
    forked_.push_back(child.get());
    seqs_.emplace(id.value, std::move(child));
  }
  parent.pending_forks = 0;
}

void StepDriver::sample_into(size_t chunk, Sequence& s, bool has_prefill, StepBackend& backend,
                             std::vector<StepOutput>* out) {
  const int32_t token = backend.sample(chunk, s);
  s.tokens.push_back(token);
  ++counters_.generated_tokens;
  if (!has_prefill) ++counters_.decode_step_tokens;
  if (s.num_generated() == 1) s.first_token = Clock::now();
  FinishReason reason = FinishReason::kNone;
  if (!s.ignore_eos &&
      std::find(config_.eog_ids.begin(), config_.eog_ids.end(), token) != config_.eog_ids.end())
    reason = FinishReason::kEos;
  else if (stop_hook_ && stop_hook_(s, token))
    reason = FinishReason::kStop;
  else if (s.num_generated() >= s.max_tokens)
    reason = FinishReason::kLength;
  if (reason != FinishReason::kNone) finish(s, reason);
  const uint32_t bs = config_.cache.block_size;
  out->push_back({.seq = s.id,
                  .request = s.parent.value != 0 ? s.parent : s.id,
                  .index = s.index,
                  .token = token,
                  .generated = s.num_generated(),
                  .finished = reason != FinishReason::kNone,
                  .finish = reason,
                  .cached_tokens = s.cached_tokens / bs * bs,
                  .logprobs = std::exchange(s.last_logprobs, std::nullopt)});
}

std::vector<StepOutput> StepDriver::step(StepBackend& backend) {
  std::vector<StepOutput> out;
  // 1. Schedule: decisions only.
  if (counters_.prefill_step_seconds > 0)
    scheduler_.set_prefill_rate(counters_.prompt_tokens_computed / counters_.prefill_step_seconds);
  const double start = backend.now();
  const uint64_t recomputes_before = scheduler_.num_preemptions(PreemptionMode::kRecompute);
  const uint64_t swaps_before = scheduler_.num_preemptions(PreemptionMode::kSwap);
  const StepPlan plan = scheduler_.schedule();
  StepLogEntry report;
  if (observer_ && !plan.empty()) {
    report.running = static_cast<uint32_t>(scheduler_.num_running());
    report.waiting = static_cast<uint32_t>(scheduler_.num_waiting());
    add_step_chunks(plan, &report);
  }
  // 2. Transfer: block bytes move in the order the scheduler queued them.
  backend.transfer(plan);
  backend.transfers_done();
  if (plan.empty()) {
    // Nothing to run: sequences may be waiting for disk or remote tier reads.
    if (scheduler_.num_loading() > 0) backend.idle(scheduler_.num_loading());
    return out;
  }
  // 3. Forward.
  bool has_prefill = false;
  for (const ScheduledChunk& c : plan.chunks)
    has_prefill |= c.seq->num_computed < c.seq->prompt_len;
  const double t0 = backend.now();
  backend.forward(plan);
  cache_.forward_done();
  const double seconds = backend.now() - t0;
  counters_.forward_seconds += seconds;
  (has_prefill ? counters_.prefill_step_seconds : counters_.decode_step_seconds) += seconds;
  ++counters_.steps;
  counters_.peak_blocks_in_use =
      std::max(counters_.peak_blocks_in_use, cache_.counters().blocks_in_use);
  // 4. Commit the new KV, then sample or score.
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence& s = *plan.chunks[i].seq;
    const uint32_t first = s.num_computed, n = plan.chunks[i].num_tokens;
    cache_.commit_tokens(s.id, std::span<const int32_t>(s.tokens).subspan(first, n));
    if (first < s.prompt_len)
      counters_.prompt_tokens_computed += std::min(s.prompt_len, first + n) - first;
    const LogitsPositions lp = logits_positions(s, first, n);
    s.num_computed += n;
    if (s.score_from) {
      if (lp.count > 0) backend.score(i, s, lp.first, lp.count);
      if (s.num_computed == s.prompt_len) finish(s, FinishReason::kLength);
      continue;
    }
    if (lp.count == 0) continue;
    // n > 1: the prompt is prefilled and committed, so the children share all its blocks; each
    // samples its first token from the same chunk with its own seed.
    if (s.pending_forks > 0 && s.num_generated() == 0) fork_children(s);
    for (Sequence* c : forked_) sample_into(i, *c, has_prefill, backend, &out);
    forked_.clear();
    sample_into(i, s, has_prefill, backend, &out);
  }
  // The blocks this step completed go down to write-through tiers and Redis now: a request's
  // last step must not wait for another step (an idle replica would never share them).
  KvTransferPlan down;
  scheduler_.plan_completed_blocks(down);
  if (!down.transfers.empty()) backend.transfer(down);
  scheduler_.remove_finished();
  // 5. Report.
  if (observer_) {
    report.start_s = start;
    report.end_s = backend.now();
    report.preempted_recompute = static_cast<uint32_t>(
        scheduler_.num_preemptions(PreemptionMode::kRecompute) - recomputes_before);
    report.preempted_swap =
        static_cast<uint32_t>(scheduler_.num_preemptions(PreemptionMode::kSwap) - swaps_before);
    const KvCacheCounters c = cache_.counters();
    report.blocks_in_use = c.blocks_in_use;
    report.blocks_cached_free = c.blocks_cached_free;
    observer_(report);
  }
  return out;
}

}  // namespace kvs
