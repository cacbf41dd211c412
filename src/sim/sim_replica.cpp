#include "sim/sim_replica.h"

#include <algorithm>
#include <memory>

#include "engine/sequence.h"
#include "kvcache/host_block_pool.h"

namespace kvs {

namespace {

// The replica's live state: the engine's scheduler and cache manager plus the sequences.
class Replica {
 public:
  Replica(const ReplicaConfig& config, const Trace& trace, const TokenSynthesizer& tokens,
          std::span<const uint32_t> indices, uint32_t id)
      : config_(config),
        tokens_(tokens),
        indices_(indices),
        cache_(config.cache),
        host_(config.host_blocks),
        scheduler_(config.scheduler, cache_, host_),
        seqs_(indices.size()) {
    result_.replica = id;
    result_.records.resize(indices.size());
    for (size_t i = 0; i < indices.size(); ++i) {
      const TraceRequest& r = trace.requests[indices[i]];
      RequestRecord& rec = result_.records[i];
      rec.trace_index = indices[i];
      rec.replica = id;
      rec.arrival_s = r.arrival_s;
      rec.input_tokens = r.input_tokens;
      rec.output_tokens = r.output_tokens;
    }
    pool_tokens_ = uint64_t{config.cache.num_blocks} * config.cache.block_size;
  }

  ReplicaResult run() {
    double now = 0;
    size_t next = 0;
    const size_t n = indices_.size();
    for (;;) {
      while (next < n && result_.records[next].arrival_s <= now) arrive(next++);
      if (scheduler_.empty()) {
        if (next == n) break;
        idle(now, result_.records[next].arrival_s);
        now = result_.records[next].arrival_s;
        continue;
      }
      now = step(now);
    }
    result_.cache = cache_.counters();
    result_.preemptions_recompute = scheduler_.num_preemptions(PreemptionMode::kRecompute);
    result_.preemptions_swap = scheduler_.num_preemptions(PreemptionMode::kSwap);
    return std::move(result_);
  }

 private:
  void arrive(size_t i) {
    RequestRecord& rec = result_.records[i];
    const uint64_t total = uint64_t{rec.input_tokens} + rec.output_tokens;
    if (total > config_.max_model_len || total > pool_tokens_) {
      rec.rejected = true;  // Engine::add_request refuses it the same way
      return;
    }
    SequenceRequest req;
    tokens_.prompt(indices_[i], &req.prompt);
    req.prompt.reserve(total);
    req.max_tokens = rec.output_tokens;
    req.ignore_eos = true;
    req.sampling.seed = 0;  // no random_device draw; nothing is sampled from it
    seqs_[i] = std::make_unique<Sequence>(SeqId{i + 1}, std::move(req));
    scheduler_.add(seqs_[i].get());
  }

  void idle(double from, double to) {
    if (to <= from) return;
    const KvCacheCounters c = cache_.counters();
    result_.steps.push_back({.start_s = from,
                             .end_s = to,
                             .blocks_in_use = c.blocks_in_use,
                             .blocks_cached_free = c.blocks_cached_free});
  }

  // One engine step starting at `now`; returns the time it ends.
  double step(double now) {
    const StepPlan plan = scheduler_.schedule();
    KVS_CHECK_MSG(!plan.empty(),
                  "simulate: the scheduler planned nothing with requests waiting (a request "
                  "larger than the pool should have been rejected)");
    StepWork work;
    for (const ScheduledChunk& c : plan.chunks) {
      const Sequence& s = *c.seq;
      work.add_chunk(s.num_computed, c.num_tokens,
                     s.num_computed + c.num_tokens == s.tokens.size());
    }
    for (const KvTransfer& t : plan.transfers) {
      if (t.kind == KvTransferKind::kCopyTokens)
        work.copied_tokens += t.num_tokens;
      else
        ++work.swapped_blocks;
    }
    const StepTime st = step_time(config_.device, config_.cost, work, config_.block_bytes);
    StepLogEntry log_entry;
    if (config_.step_log != nullptr) add_step_chunks(plan, &log_entry);
    const double end = now + st.total_s;
    StepSample sample{.start_s = now,
                      .end_s = end,
                      .running = static_cast<uint32_t>(scheduler_.num_running()),
                      .waiting = static_cast<uint32_t>(scheduler_.num_waiting()),
                      .tokens = static_cast<uint32_t>(work.tokens),
                      .compute_bound = st.compute_s >= st.memory_s};
    result_.peak_blocks_in_use =
        std::max(result_.peak_blocks_in_use, cache_.counters().blocks_in_use);
    // Commit as Engine::step does: the chunk's KV, then a token for a chunk that reaches the end.
    for (const ScheduledChunk& c : plan.chunks) {
      Sequence& s = *c.seq;
      const uint32_t start = s.num_computed, n = c.num_tokens;
      cache_.commit_tokens(s.id, std::span<const int32_t>(s.tokens).subspan(start, n));
      if (start < s.prompt_len)
        result_.prompt_tokens_computed += std::min(s.prompt_len, start + n) - start;
      s.num_computed += n;
      if (s.num_computed != s.tokens.size()) continue;  // a prefill chunk short of the end
      const size_t i = s.id.value - 1;
      RequestRecord& rec = result_.records[i];
      s.tokens.push_back(tokens_.output_token(indices_[i]));
      if (s.num_generated() == 1) {
        rec.first_token_s = end;
        rec.cached_tokens = s.cached_tokens;
      }
      if (s.num_generated() >= s.max_tokens) {
        cache_.free(s.id);
        s.status = SeqStatus::kFinished;
        s.finish = FinishReason::kLength;
        rec.finish_s = end;
        rec.preemptions = s.num_preemptions;
        finished_.push_back(i);
      }
    }
    for (const PreemptionEvent& e : scheduler_.take_preemption_events())
      ++(e.mode == PreemptionMode::kSwap ? sample.preempted_swap : sample.preempted_recompute);
    scheduler_.remove_finished();
    for (size_t i : finished_) seqs_[i].reset();  // the scheduler no longer holds it
    finished_.clear();
    const KvCacheCounters c = cache_.counters();
    sample.blocks_in_use = c.blocks_in_use;
    sample.blocks_cached_free = c.blocks_cached_free;
    if (config_.step_log != nullptr) {
      log_entry.start_s = now;
      log_entry.end_s = end;
      log_entry.running = sample.running;
      log_entry.waiting = sample.waiting;
      log_entry.preempted_recompute = sample.preempted_recompute;
      log_entry.preempted_swap = sample.preempted_swap;
      log_entry.blocks_in_use = sample.blocks_in_use;
      log_entry.blocks_cached_free = sample.blocks_cached_free;
      config_.step_log->write(log_entry);
    }
    result_.steps.push_back(sample);
    ++result_.num_steps;
    result_.busy_s += st.total_s;
    return end;
  }

  const ReplicaConfig& config_;
  const TokenSynthesizer& tokens_;
  std::span<const uint32_t> indices_;
  KvCacheManager cache_;
  HostBlockPool host_;
  Scheduler scheduler_;
  std::vector<std::unique_ptr<Sequence>> seqs_;  // by position in indices_; id = position + 1
  std::vector<size_t> finished_;
  uint64_t pool_tokens_ = 0;
  ReplicaResult result_;
};

}  // namespace

ReplicaResult run_replica(const ReplicaConfig& config, const Trace& trace,
                          const TokenSynthesizer& tokens, std::span<const uint32_t> indices,
                          uint32_t replica) {
  Replica r(config, trace, tokens, indices, replica);
  return r.run();
}

}  // namespace kvs
