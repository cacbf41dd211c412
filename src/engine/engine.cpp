#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>

#include "kvcache/block_hash.h"

namespace kvs {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEos: return "stop";
    case FinishReason::kStop: return "stop";
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

// The step over the model: the transfer executor moves the bytes, the model runner runs the
// forward pass on the inputs the cache manager builds once, the samplers sample.
class Engine::ModelBackend : public StepBackend {
 public:
  explicit ModelBackend(Engine& e) : e_(e) {}

  double now() override {
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  void transfer(const KvTransferPlan& plan) override { e_.transfers_->run(plan); }
  void transfers_done() override {
    if (e_.offload_ != nullptr) e_.offload_->policy().end_step();
  }
  void idle(size_t) override {
    // Sequences wait for disk or remote tier reads: wait for one to land rather than spin.
    if (e_.offload_ != nullptr) e_.offload_->policy().wait_for_tier_reads(0.01);
  }
  void forward(const StepPlan& plan) override {
    rows_.clear();
    for (const ScheduledChunk& c : plan.chunks)
      rows_.push_back(
          {.seq = c.seq->id, .first_pos = c.seq->num_computed, .num_tokens = c.num_tokens});
    KvCacheManager& cache = e_.driver_->cache();
    cache.build_step_inputs(rows_, &inputs_);
    recent_slots_.clear();
    if (e_.kv_pool_.recent_window > 0)
      for (const ScheduledChunk& c : plan.chunks)
        recent_slots_.push_back(cache.recent_slot(c.seq->id));
    logits_ = e_.runner_->run(plan.chunks, inputs_, recent_slots_, cache.take_recent_changes(),
                              cache.take_start_row_copies());
  }
  int32_t sample(size_t chunk, Sequence& s) override {
    const int32_t vocab = static_cast<int32_t>(e_.model_.spec().vocab_size);
    const std::span<const int32_t> all(s.tokens);
    const int32_t token =
        s.sampler.sample(row(chunk), vocab,
                         {.prompt = all.first(s.prompt_len),
                          .output = all.subspan(s.prompt_len),
                          .eog_ids = s.ignore_eos ? std::span<const int32_t>()
                                                  : std::span<const int32_t>(e_.config_.eog_ids)});
    if (s.sampling.logprobs)
      s.last_logprobs = sampled_logprobs(row(chunk), vocab, token, *s.sampling.logprobs);
    return token;
  }
  void score(size_t chunk, Sequence& s, uint32_t first, uint32_t count) override {
    const int64_t vocab = e_.model_.spec().vocab_size;
    const float* rows = row(chunk);
    for (uint32_t i = 0; i < count; ++i) {
      // -log softmax(row)[next token], in double: max-shifted, as llama.cpp's perplexity does.
      const float* r = rows + i * vocab;
      float m = r[0];
      for (int64_t v = 1; v < vocab; ++v) m = std::max(m, r[v]);
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(r[v] - m));
      const int32_t next = s.tokens[first + i + 1];
      s.prompt_nll += -(static_cast<double>(r[next] - m) - std::log(sum));
      ++s.prompt_scored;
    }
    if (e_.score_observer_) e_.score_observer_(s, first, count, rows, vocab);
  }

 private:
  const float* row(size_t chunk) const {
    return logits_.logits.data() + size_t{logits_.row_begin[chunk]} * e_.model_.spec().vocab_size;
  }

  Engine& e_;
  std::vector<StepRow> rows_;
  std::vector<int32_t> recent_slots_;
  StepInputs inputs_;
  StepLogits logits_;
};

Engine::Engine(TransformerModel& model, const EngineConfig& config, const KvPoolPlan& pool)
    : model_(model), config_(config), kv_pool_(pool) {}

Result<std::unique_ptr<Engine>> Engine::create(TransformerModel& model,
                                               const EngineConfig& config) {
  if (config.max_num_batched_tokens == 0)
    return invalid_argument("--max-num-batched-tokens must be positive");
  if (config.max_num_seqs == 0) return invalid_argument("--max-num-seqs must be positive");
  const ModelSpec& spec = model.spec();
  KVS_ASSIGN_OR_RETURN(
      KvPoolPlan pool,
      plan_kv_pool(spec.kv_model_shape(config.k_dtype, config.v_dtype, config.layer_formats),
                   config.kv_cache_memory, config.block_size, config.max_num_seqs,
                   config.recent_window, config.attention_sink, config.recent_window_dtype));
  KVS_RETURN_IF_ERROR(check_window_preemption(config.recent_window, config.preemption_mode));
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
  // The host area: swap's share (swap_host_blocks, the simulator's rule too) and the host
  // tier's, as many whole blocks as --kv-offload-memory holds.
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
  KVS_ASSIGN_OR_RETURN(
      const uint64_t swap_blocks,
      swap_host_blocks(config.preemption_mode, config.swap_space, pool.block_bytes));
  const uint64_t tier_blocks = host_tier_blocks(oc.host_bytes, pool.block_bytes);
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
  // With the attention sink every query reads position 0 exactly, so the cached blocks' bytes
  // differ from the same tokens' without it: their keys (in memory, the tiers and KV events) say
  // which they are.
  // So do per-layer formats (their blocks are laid out layer by layer in other formats).
  uint64_t fingerprint = config.attention_sink
                             ? attention_sink_fingerprint(config.model_fingerprint)
                             : config.model_fingerprint;
  if (!config.layer_formats.empty())
    fingerprint = kv_layer_formats_fingerprint(fingerprint, config.layer_formats);
  std::unique_ptr<RecentWindow> recent;
  if (pool.recent_window > 0) {
    KVS_ASSIGN_OR_RETURN(
        RecentWindow w,
        RecentWindow::create(pool.recent_window_slots, pool.recent_window,
                             static_cast<uint32_t>(pool.shape.layers.size()), pool.unit.kv_heads,
                             pool.unit.head_dim_k, pool.attention_sink, pool.recent_window_dtype));
    recent = std::make_unique<RecentWindow>(std::move(w));
  }
  KvCacheConfig cache =
      pool_cache_config(pool, config.enable_prefix_caching, fingerprint,
                        config.prefix_hash_seed ? *config.prefix_hash_seed : random_seed());
  cache.tier_keys = oc.enabled() || config.kv_events;
  cache.log_completed_blocks =
      oc.enabled() && (oc.policy == OffloadPolicy::kWriteThrough || !oc.remote_urls.empty());
  cache.log_events = config.kv_events;
  cache.tier_secrets = TierSecrets::of(e->secret_);
  e->driver_ = std::make_unique<StepDriver>(
      StepDriverConfig{.pool = pool,
                       .cache = cache,
                       .scheduler = {.max_num_batched_tokens = config.max_num_batched_tokens,
                                     .max_num_seqs = config.max_num_seqs,
                                     .preemption_mode = config.preemption_mode,
                                     .recent_window = config.recent_window},
                       .host_blocks = static_cast<uint32_t>(host_blocks),
                       .max_model_len = e->max_model_len_,
                       .vocab_size = spec.vocab_size,
                       .eog_ids = config.eog_ids});
  if (oc.enabled()) {
    KvOffloadConfig with_events = oc;
    with_events.log_events = config.kv_events;
    KVS_ASSIGN_OR_RETURN(
        e->offload_, KvOffload::create(with_events, KvStorageShape::of(pool), fingerprint,
                                       TierSecrets::of(e->secret_), e->driver_->host_area(),
                                       e->host_storage_.get(), static_cast<uint32_t>(tier_blocks)));
  }
  e->transfers_ = std::make_unique<KvTransferExecutor>(
      *e->storage_, e->host_storage_.get(),
      e->offload_ != nullptr ? &e->offload_->stores() : nullptr);
  e->runner_ = std::make_unique<ModelRunner>(model, *e->storage_, *e->threads_, std::move(recent));
  if (e->offload_ != nullptr) e->driver_->scheduler().attach_tiers(&e->offload_->policy());
  e->backend_ = std::make_unique<ModelBackend>(*e);
  return e;
}

Engine::~Engine() {
  if (transfers_ != nullptr)
    transfers_->persist_tiers(driver_->cache(), config_.offload_flush_seconds);
}

void Engine::set_step_log(StepLog* log) {
  if (log == nullptr) {
    driver_->set_step_observer(nullptr);
    return;
  }
  // Wall-clock seconds since the Unix epoch: a step log's clock, comparable with a client's.
  const double offset = wall_seconds() - backend_->now();
  driver_->set_step_observer([log, offset](const StepLogEntry& e) {
    StepLogEntry w = e;
    w.start_s += offset;
    w.end_s += offset;
    log->write(w);
  });
}

std::vector<StepOutput> Engine::step() { return driver_->step(*backend_); }

EngineSnapshot Engine::snapshot(bool with_fragmentation) const {
  EngineSnapshot s;
  const Scheduler& scheduler = driver_->scheduler();
  const KvCacheManager& cache = driver_->cache();
  s.running = static_cast<uint32_t>(scheduler.num_running());
  s.waiting = static_cast<uint32_t>(scheduler.num_waiting());
  s.swapped = static_cast<uint32_t>(scheduler.num_swapped());
  s.loading = static_cast<uint32_t>(scheduler.num_loading());
  s.steps = driver_->counters().steps;
  s.cache = cache.counters();
  if (with_fragmentation) s.fragmentation = cache.stats().fragmentation;
  s.preemptions_recompute = scheduler.num_preemptions(PreemptionMode::kRecompute);
  s.preemptions_swap = scheduler.num_preemptions(PreemptionMode::kSwap);
  s.attention_sink_refused_hits = scheduler.num_sink_refused_hits();
  if (offload_ != nullptr) s.offload = offload_->stats();
  // The host area is swap's share plus the host tier's; swap may borrow from the tier's.
  s.swap_used_bytes =
      (driver_->host_area().num_used() - s.offload.host_blocks_held) * kv_pool_.block_bytes;
  s.swap_space_bytes =
      (driver_->host_area().num_blocks() - s.offload.host_area_blocks) * kv_pool_.block_bytes;
  s.pool_bytes = kv_pool_.pool_bytes;
  s.key_tail_bytes = kv_pool_.key_tail_bytes;
  s.recent_window_bytes = kv_pool_.recent_window_bytes;
  s.block_bytes = kv_pool_.block_bytes;
  s.weight_file_bytes = model_.weight_bytes();
  s.weight_resident_bytes = model_.resident_weight_bytes();
  s.weight_pack_seconds = model_.weight_pack_seconds();
  return s;
}

void Engine::for_each_block_table(const std::function<void(const SequenceBlocks&)>& fn) const {
  SequenceBlocks view;
  const KvCacheManager& cache = driver_->cache();
  driver_->for_each_sequence([&](const Sequence& s) {
    if (s.status != SeqStatus::kRunning || !cache.contains(s.id)) return;
    view.seq = s.id;
    view.request = s.parent.value != 0 ? s.parent : s.id;
    view.sample = s.index;
    view.num_tokens = cache.num_tokens(s.id);
    view.cache_salt = s.cache_salt;
    view.tables.clear();
    for (uint32_t g = 0; g < kv_pool_.groups.num_groups(); ++g)
      view.tables.push_back(cache.block_table(s.id, g));
    fn(view);
  });
}

Status Engine::check_integrity() const {
  KVS_RETURN_IF_ERROR(driver_->cache().check_integrity());
  KVS_RETURN_IF_ERROR(driver_->host_area().check_integrity());
  return offload_ != nullptr ? offload_->check_integrity() : Status::ok();
}

}  // namespace kvs
