#include "sim/sim_replica.h"

#include <algorithm>
#include <unordered_map>

namespace kvs {

namespace {

// The step over the step-time model: no bytes move, the clock advances by the modelled step
// time, and sampled tokens are the synthesizer's.
class SimBackend : public StepBackend {
 public:
  SimBackend(const ReplicaConfig& config, const TokenSynthesizer& tokens)
      : config_(config), tokens_(tokens) {}

  double now() override { return clock_; }
  void set_clock(double t) { clock_ = t; }
  void transfer(const KvTransferPlan&) override {}
  void forward(const StepPlan& plan) override {
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
    clock_ += st.total_s;
    last_compute_bound_ = st.compute_s >= st.memory_s;
  }
  int32_t sample(size_t, Sequence& s) override {
    return tokens_.output_token(trace_index_.at(s.parent.value != 0 ? s.parent.value : s.id.value));
  }
  void note_trace_index(SeqId id, uint32_t trace_index) { trace_index_[id.value] = trace_index; }
  [[nodiscard]] bool last_compute_bound() const { return last_compute_bound_; }

 private:
  const ReplicaConfig& config_;
  const TokenSynthesizer& tokens_;
  double clock_ = 0;
  bool last_compute_bound_ = false;
  std::unordered_map<uint64_t, uint32_t> trace_index_;
};

// The replica's live state: the engine's step driver plus the records of its requests.
class Replica {
 public:
  Replica(const ReplicaConfig& config, const Trace& trace, const TokenSynthesizer& tokens,
          std::span<const uint32_t> indices, uint32_t id)
      : config_(config),
        tokens_(tokens),
        indices_(indices),
        driver_(config.driver),
        backend_(config, tokens) {
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
    driver_.set_step_observer([this](const StepLogEntry& e) { observe(e); });
  }

  ReplicaResult run() {
    size_t next = 0;
    const size_t n = indices_.size();
    for (;;) {
      while (next < n && result_.records[next].arrival_s <= backend_.now()) arrive(next++);
      if (!driver_.has_unfinished()) {
        if (next == n) break;
        idle(backend_.now(), result_.records[next].arrival_s);
        backend_.set_clock(result_.records[next].arrival_s);
        continue;
      }
      const uint64_t steps_before = driver_.counters().steps;
      const std::vector<StepOutput> outputs = driver_.step(backend_);
      KVS_CHECK_MSG(driver_.counters().steps > steps_before,
                    "simulate: the scheduler planned nothing with requests waiting (a request "
                    "larger than the pool should have been rejected)");
      for (const StepOutput& o : outputs) record(o);
      (void)driver_.scheduler().take_preemption_events();  // counted from the counters
    }
    const StepCounters& c = driver_.counters();
    result_.cache = driver_.cache().counters();
    result_.preemptions_recompute = driver_.scheduler().num_preemptions(PreemptionMode::kRecompute);
    result_.preemptions_swap = driver_.scheduler().num_preemptions(PreemptionMode::kSwap);
    result_.prompt_tokens_computed = c.prompt_tokens_computed;
    result_.num_steps = c.steps;
    result_.busy_s = c.forward_seconds;
    result_.peak_blocks_in_use = c.peak_blocks_in_use;
    return std::move(result_);
  }

 private:
  void arrive(size_t i) {
    RequestRecord& rec = result_.records[i];
    SequenceRequest req;
    tokens_.prompt(indices_[i], &req.prompt);
    req.prompt.reserve(uint64_t{rec.input_tokens} + rec.output_tokens);
    req.max_tokens = rec.output_tokens;
    req.ignore_eos = true;
    req.sampling.seed = 0;  // no random_device draw; nothing is sampled from it
    const Result<SeqId> id = driver_.add(std::move(req));
    if (!id.is_ok()) {
      rec.rejected = true;  // Engine::add_request refuses it the same way
      return;
    }
    record_of_[id->value] = i;
    backend_.note_trace_index(*id, indices_[i]);
  }

  void record(const StepOutput& o) {
    const size_t i = record_of_.at(o.request.value);
    RequestRecord& rec = result_.records[i];
    const Sequence& s = driver_.sequence(o.seq);
    if (o.generated == 1) {
      rec.first_token_s = backend_.now();
      rec.cached_tokens = s.cached_tokens;
    }
    if (o.finished) {
      rec.finish_s = backend_.now();
      rec.preemptions = s.num_preemptions;
      driver_.release(o.seq);
      record_of_.erase(o.request.value);
    }
  }

  void observe(const StepLogEntry& e) {
    StepSample sample{.start_s = e.start_s,
                      .end_s = e.end_s,
                      .running = e.running,
                      .waiting = e.waiting,
                      .blocks_in_use = e.blocks_in_use,
                      .blocks_cached_free = e.blocks_cached_free,
                      .preempted_recompute = e.preempted_recompute,
                      .preempted_swap = e.preempted_swap,
                      .compute_bound = backend_.last_compute_bound()};
    for (const StepLogChunk& c : e.chunks) sample.tokens += c.num_tokens;
    result_.steps.push_back(sample);
    if (config_.step_log != nullptr) config_.step_log->write(e);
  }

  void idle(double from, double to) {
    if (to <= from) return;
    const KvCacheCounters c = driver_.cache().counters();
    result_.steps.push_back({.start_s = from,
                             .end_s = to,
                             .blocks_in_use = c.blocks_in_use,
                             .blocks_cached_free = c.blocks_cached_free});
  }

  const ReplicaConfig& config_;
  const TokenSynthesizer& tokens_;
  std::span<const uint32_t> indices_;
  StepDriver driver_;
  SimBackend backend_;
  std::unordered_map<uint64_t, size_t> record_of_;  // request id -> position in indices_
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
