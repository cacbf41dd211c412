#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>

namespace kvs {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEos: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "none";
}

namespace {
uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

// Seconds since the Unix epoch: a step log's clock, comparable with a client's.
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

Engine::Engine(TransformerModel& model, const EngineConfig& config, const KvPoolPlan& pool)
    : model_(model), config_(config), kv_pool_(pool) {}

Result<std::unique_ptr<Engine>> Engine::create(TransformerModel& model,
                                               const EngineConfig& config) {
  if (config.max_num_batched_tokens == 0)
    return invalid_argument("--max-num-batched-tokens must be positive");
  if (config.max_num_seqs == 0) return invalid_argument("--max-num-seqs must be positive");
  const ModelSpec& spec = model.spec();
  KVS_ASSIGN_OR_RETURN(KvPoolPlan pool,
                       plan_kv_pool(spec.kv_model_shape(config.k_dtype, config.v_dtype),
                                    config.kv_cache_memory, config.block_size));
  if (config.offload.enabled()) KVS_RETURN_IF_ERROR(config.offload.validate());
  std::unique_ptr<Engine> e(new Engine(model, config, pool));
  if (config.secret) {
    e->secret_ = *config.secret;
  } else if (!config.offload.disk_dir.empty()) {
    KVS_ASSIGN_OR_RETURN(e->secret_, DiskTier::directory_secret(config.offload.disk_dir));
  } else {
    e->secret_ = ServerSecret::random();
  }
  e->max_model_len_ = config.max_model_len ? config.max_model_len : spec.context_length;
  e->threads_ = std::make_unique<ThreadPool>(config.threads > 0 ? config.threads
                                                                : ThreadPool::hardware_threads());
  KVS_ASSIGN_OR_RETURN(KvBlockStorage storage, KvBlockStorage::create(KvStorageShape::of(pool)));
  e->storage_ = std::make_unique<KvBlockStorage>(std::move(storage));
  // The host area: swap's share, as many whole blocks as --swap-space holds (swap mode only),
  // and the host tier's, as many as --kv-offload-memory holds.
  const KvOffloadConfig& oc = config.offload;
  if (config.kv_events) {
    if (!config.enable_prefix_caching)
      return invalid_argument(
          "KV events describe the prefix cache: they need prefix caching (drop "
          "--no-prefix-caching)");
    if (pool.groups.num_groups() != 1)
      return invalid_argument(
          "KV events support models whose layers all attend to the full context; this model "
          "has sliding-window layer groups");
  }
  if (oc.enabled()) {
    if (!config.enable_prefix_caching)
      return invalid_argument(
          "the KV offload tiers hold prefix-cache blocks: they need prefix "
          "caching (drop --no-prefix-caching)");
    if (pool.groups.num_groups() != 1)
      return invalid_argument(
          "the KV offload tiers support models whose layers all attend to "
          "the full context; this model has sliding-window layer groups");
  }
  const uint64_t swap_blocks =
      config.preemption_mode == PreemptionMode::kSwap
          ? std::min<uint64_t>(config.swap_space / pool.block_bytes, kMaxPoolBlocks)
          : 0;
  const uint64_t tier_blocks = std::min<uint64_t>(oc.host_bytes / pool.block_bytes, kMaxPoolBlocks);
  if (oc.host_bytes > 0 && tier_blocks == 0)
    return invalid_argument("--kv-offload-memory " + std::to_string(oc.host_bytes) +
                            " holds no block of " + std::to_string(pool.block_bytes) + " bytes");
  const uint64_t host_blocks = std::min<uint64_t>(swap_blocks + tier_blocks, kMaxPoolBlocks);
  if (host_blocks > 0) {
    KvStorageShape host = KvStorageShape::of(pool);
    host.num_blocks = static_cast<uint32_t>(host_blocks);
    KVS_ASSIGN_OR_RETURN(KvBlockStorage h, KvBlockStorage::create(host));
    e->host_storage_ = std::make_unique<KvBlockStorage>(std::move(h));
  }
  e->host_blocks_ = std::make_unique<HostBlockPool>(static_cast<uint32_t>(host_blocks));
  e->cache_ = std::make_unique<KvCacheManager>(KvCacheConfig{
      .num_blocks = pool.num_blocks,
      .block_size = config.block_size,
      .group_windows = pool.groups.windows,
      .enable_prefix_caching = config.enable_prefix_caching,
      .model_fingerprint = config.model_fingerprint,
      .hash_seed = config.prefix_hash_seed ? *config.prefix_hash_seed : random_seed(),
      .k_dtype = config.k_dtype,
      .v_dtype = config.v_dtype,
      .tier_keys = oc.enabled() || config.kv_events,
      .log_completed_blocks =
          oc.enabled() && (oc.policy == OffloadPolicy::kWriteThrough || !oc.remote_urls.empty()),
      .log_events = config.kv_events,
      .tier_secrets = TierSecrets::of(e->secret_)});
  if (oc.enabled()) {
    KvOffloadConfig with_events = oc;
    with_events.log_events = config.kv_events;
    KVS_ASSIGN_OR_RETURN(
        e->offload_,
        KvOffload::create(with_events, KvStorageShape::of(pool), config.model_fingerprint,
                          TierSecrets::of(e->secret_), *e->host_blocks_, e->host_storage_.get(),
                          static_cast<uint32_t>(tier_blocks)));
  }
  e->transfers_ =
      std::make_unique<KvTransferExecutor>(*e->storage_, e->host_storage_.get(), e->offload_.get());
  e->runner_ = std::make_unique<ModelRunner>(model, *e->storage_, *e->threads_);
  e->scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{.max_num_batched_tokens = config.max_num_batched_tokens,
                      .max_num_seqs = config.max_num_seqs,
                      .preemption_mode = config.preemption_mode},
      *e->cache_, *e->host_blocks_);
  e->scheduler_->attach_offload(e->offload_.get());
  return e;
}

Engine::~Engine() {
  if (offload_ != nullptr) offload_->persist(*storage_, *cache_, config_.offload_flush_seconds);
}

Result<SeqId> Engine::add_request(SequenceRequest req) {
  if (req.prompt.empty()) return invalid_argument("the prompt is empty");
  if (req.score_from) {
    if (req.max_tokens != 0 || req.n != 1)
      return invalid_argument("a scored prompt generates nothing: max_tokens 0 and n 1");
    if (req.prompt.size() < 2) return invalid_argument("a scored prompt needs two tokens");
  } else if (req.max_tokens == 0) {
    return invalid_argument("max_tokens must be at least 1");
  }
  for (int32_t id : req.prompt)
    if (id < 0 || static_cast<uint32_t>(id) >= model_.spec().vocab_size)
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
  KVS_RETURN_IF_ERROR(req.sampling.validate());
  if (req.n < 1 || req.n > kMaxSamplesPerRequest)
    return invalid_argument("n must be between 1 and " + std::to_string(kMaxSamplesPerRequest) +
                            ", got " + std::to_string(req.n));
  const uint64_t total = req.prompt.size() + uint64_t{req.max_tokens};
  if (req.prompt.size() > max_model_len_)
    return invalid_argument("the prompt has " + std::to_string(req.prompt.size()) +
                            " tokens, more than the maximum model length " +
                            std::to_string(max_model_len_));
  if (total > max_model_len_)
    return invalid_argument("prompt (" + std::to_string(req.prompt.size()) +
                            " tokens) + max_tokens (" + std::to_string(req.max_tokens) +
                            ") exceeds the maximum model length " + std::to_string(max_model_len_));
  // The most blocks the request can hold (every token prefilled in the engine's chunks; a
  // sliding group holds only its window + a chunk): it must fit the pool when it runs alone.
  if (const uint64_t need =
          sequence_footprint(kv_pool_, total, config_.max_num_batched_tokens).blocks;
      need > kv_pool_.num_blocks)
    return resource_exhausted("prompt + max_tokens = " + std::to_string(total) +
                              " tokens need up to " + std::to_string(need) +
                              " blocks, more than the KV pool's " +
                              std::to_string(kv_pool_.num_blocks) + " (raise --kv-cache-memory)");
  const SeqId id{next_id_++};
  auto seq = std::make_unique<Sequence>(id, std::move(req));
  scheduler_->add(seq.get());
  seqs_.emplace(id.value, std::move(seq));
  return id;
}

const Sequence& Engine::sequence(SeqId id) const {
  auto it = seqs_.find(id.value);
  KVS_CHECK_MSG(it != seqs_.end(), "unknown sequence");
  return *it->second;
}

void Engine::finish(Sequence& s, FinishReason reason) {
  if (s.status == SeqStatus::kRunning) cache_->free(s.id);
  s.status = SeqStatus::kFinished;
  s.finish = reason;
  s.finished = Clock::now();
}

void Engine::fork_children(Sequence& parent) {
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
    const Status st = cache_->fork(parent.id, id);
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
    scheduler_->add_running(child.get());
    forked_.push_back(child.get());
    seqs_.emplace(id.value, std::move(child));
  }
  parent.pending_forks = 0;
}

void Engine::sample_into(Sequence& s, const float* logits, bool has_prefill,
                         std::vector<StepOutput>* out) {
  const int32_t vocab = static_cast<int32_t>(model_.spec().vocab_size);
  const int32_t token = s.sampler.sample(logits, vocab);
  s.tokens.push_back(token);
  ++counters_.generated_tokens;
  if (!has_prefill) ++counters_.decode_step_tokens;
  if (s.num_generated() == 1) s.first_token = Clock::now();
  FinishReason reason = FinishReason::kNone;
  if (!s.ignore_eos &&
      std::find(config_.eog_ids.begin(), config_.eog_ids.end(), token) != config_.eog_ids.end())
    reason = FinishReason::kEos;
  else if (s.num_generated() >= s.max_tokens)
    reason = FinishReason::kLength;
  if (reason != FinishReason::kNone) finish(s, reason);
  out->push_back({.seq = s.id, .token = token, .finished = reason != FinishReason::kNone});
}

void Engine::score_into(Sequence& s, const float* logits, uint32_t first_pos, uint32_t count) {
  const int64_t vocab = model_.spec().vocab_size;
  for (uint32_t i = 0; i < count; ++i) {
    // -log softmax(row)[next token], in double: max-shifted, as llama.cpp's perplexity does.
    const float* row = logits + i * vocab;
    float m = row[0];
    for (int64_t v = 1; v < vocab; ++v) m = std::max(m, row[v]);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - m));
    const int32_t next = s.tokens[first_pos + i + 1];
    s.prompt_nll += -(static_cast<double>(row[next] - m) - std::log(sum));
    ++s.prompt_scored;
  }
}

void Engine::abort(SeqId id) {
  auto it = seqs_.find(id.value);
  if (it == seqs_.end() || it->second->status == SeqStatus::kFinished) return;
  finish(*it->second, FinishReason::kAbort);
  scheduler_->remove_finished();
}

void Engine::release(SeqId id) {
  auto it = seqs_.find(id.value);
  if (it == seqs_.end()) return;
  KVS_CHECK_MSG(it->second->status == SeqStatus::kFinished, "release() of a live sequence");
  seqs_.erase(it);
}

std::vector<StepOutput> Engine::step() {
  std::vector<StepOutput> out;
  // 1. Schedule: decisions only.
  if (offload_ != nullptr && counters_.prefill_step_seconds > 0)
    scheduler_->set_prefill_rate(counters_.prompt_tokens_computed / counters_.prefill_step_seconds);
  const bool logging = step_log_ != nullptr;
  const double log_start = logging ? wall_seconds() : 0;
  const uint64_t recomputes_before =
      logging ? scheduler_->num_preemptions(PreemptionMode::kRecompute) : 0;
  const uint64_t swaps_before = logging ? scheduler_->num_preemptions(PreemptionMode::kSwap) : 0;
  const StepPlan plan = scheduler_->schedule();
  StepLogEntry log_entry;
  if (logging && !plan.empty()) {
    log_entry.start_s = log_start;
    log_entry.running = static_cast<uint32_t>(scheduler_->num_running());
    log_entry.waiting = static_cast<uint32_t>(scheduler_->num_waiting());
    log_entry.preempted_recompute = static_cast<uint32_t>(
        scheduler_->num_preemptions(PreemptionMode::kRecompute) - recomputes_before);
    log_entry.preempted_swap =
        static_cast<uint32_t>(scheduler_->num_preemptions(PreemptionMode::kSwap) - swaps_before);
    add_step_chunks(plan, &log_entry);
  }
  // 2. Transfer: block bytes move in the order the scheduler queued them.
  transfers_->run(plan);
  if (offload_ != nullptr) offload_->end_step();
  if (plan.empty()) {
    // Nothing to run: sequences may be waiting for disk or remote tier reads. Wait for one to land
    // rather than spin.
    if (offload_ != nullptr && scheduler_->num_loading() > 0) offload_->wait_for_tier_reads(0.01);
    return out;
  }
  // 3. Forward: the step's inputs, built once by the cache manager.
  rows_.clear();
  bool has_prefill = false;
  for (const ScheduledChunk& c : plan.chunks) {
    has_prefill |= c.seq->num_computed < c.seq->prompt_len;
    rows_.push_back(
        {.seq = c.seq->id, .first_pos = c.seq->num_computed, .num_tokens = c.num_tokens});
  }
  cache_->build_step_inputs(rows_, &inputs_);
  const auto t0 = Clock::now();
  const StepLogits logits = runner_->run(plan.chunks, inputs_);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  counters_.forward_seconds += seconds;
  (has_prefill ? counters_.prefill_step_seconds : counters_.decode_step_seconds) += seconds;
  ++counters_.steps;
  counters_.peak_blocks_in_use =
      std::max(counters_.peak_blocks_in_use, cache_->counters().blocks_in_use);
  // 4. Commit the new KV, then sample or score.
  const size_t vocab = model_.spec().vocab_size;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Sequence& s = *plan.chunks[i].seq;
    const uint32_t start = s.num_computed, n = plan.chunks[i].num_tokens;
    cache_->commit_tokens(s.id, std::span<const int32_t>(s.tokens).subspan(start, n));
    if (start < s.prompt_len)
      counters_.prompt_tokens_computed += std::min(s.prompt_len, start + n) - start;
    const LogitsPositions lp = logits_positions(s, start, n);
    s.num_computed += n;
    const uint32_t rows = logits.row_begin[i + 1] - logits.row_begin[i];
    KVS_CHECK(rows == lp.count);
    const float* first_row = logits.logits.data() + size_t{logits.row_begin[i]} * vocab;
    if (s.score_from) {
      score_into(s, first_row, lp.first, lp.count);
      if (s.num_computed == s.prompt_len) finish(s, FinishReason::kLength);
      continue;
    }
    if (rows == 0) continue;
    // n > 1: the prompt is prefilled and committed, so the children share all its blocks; each
    // samples its first token from the same logits with its own seed.
    if (s.pending_forks > 0 && s.num_generated() == 0) fork_children(s);
    for (Sequence* c : forked_) sample_into(*c, first_row, has_prefill, &out);
    forked_.clear();
    sample_into(s, first_row, has_prefill, &out);
  }
  // The blocks this step completed go down to write-through tiers and Redis now: a request's
  // last step must not wait for another step (an idle replica would never share them).
  if (offload_ != nullptr) {
    KvTransferPlan down;
    scheduler_->plan_completed_blocks(down);
    if (!down.transfers.empty()) transfers_->run(down);
  }
  scheduler_->remove_finished();
  if (logging) {
    log_entry.end_s = wall_seconds();
    const KvCacheCounters c = cache_->counters();
    log_entry.blocks_in_use = c.blocks_in_use;
    log_entry.blocks_cached_free = c.blocks_cached_free;
    step_log_->write(log_entry);
  }
  return out;
}

EngineSnapshot Engine::snapshot(bool with_fragmentation) const {
  EngineSnapshot s;
  s.running = static_cast<uint32_t>(scheduler_->num_running());
  s.waiting = static_cast<uint32_t>(scheduler_->num_waiting());
  s.swapped = static_cast<uint32_t>(scheduler_->num_swapped());
  s.loading = static_cast<uint32_t>(scheduler_->num_loading());
  s.steps = counters_.steps;
  s.cache = cache_->counters();
  if (with_fragmentation) s.fragmentation = cache_->stats().fragmentation;
  s.preemptions_recompute = scheduler_->num_preemptions(PreemptionMode::kRecompute);
  s.preemptions_swap = scheduler_->num_preemptions(PreemptionMode::kSwap);
  if (offload_ != nullptr) s.offload = offload_->stats();
  // The host area is swap's share plus the host tier's; swap may borrow from the tier's.
  s.swap_used_bytes =
      (host_blocks_->num_used() - s.offload.host_blocks_held) * kv_pool_.block_bytes;
  s.swap_space_bytes =
      (host_blocks_->num_blocks() - s.offload.host_area_blocks) * kv_pool_.block_bytes;
  s.pool_bytes = kv_pool_.pool_bytes;
  s.block_bytes = kv_pool_.block_bytes;
  return s;
}

void Engine::for_each_block_table(const std::function<void(const SequenceBlocks&)>& fn) const {
  SequenceBlocks view;
  for (const auto& [id, s] : seqs_) {
    if (s->status != SeqStatus::kRunning || !cache_->contains(s->id)) continue;
    view.seq = s->id;
    view.request = s->parent.value != 0 ? s->parent : s->id;
    view.sample = s->index;
    view.num_tokens = cache_->num_tokens(s->id);
    view.cache_salt = s->cache_salt;
    view.tables.clear();
    for (uint32_t g = 0; g < kv_pool_.groups.num_groups(); ++g)
      view.tables.push_back(cache_->block_table(s->id, g));
    fn(view);
  }
}

Status Engine::check_integrity() const {
  KVS_RETURN_IF_ERROR(cache_->check_integrity());
  KVS_RETURN_IF_ERROR(host_blocks_->check_integrity());
  return offload_ != nullptr ? offload_->check_integrity() : Status::ok();
}

}  // namespace kvs
