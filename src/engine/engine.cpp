#include "engine/engine.h"

#include <algorithm>
#include <random>
#include <string>

#include "kernels/kv_vector.h"

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

Result<KvPoolInfo> size_kv_pool(const ModelSpec& spec, uint64_t memory, uint32_t block_size,
                                KvDtype k, KvDtype v) {
  if (block_size < 1 || block_size > 256)
    return invalid_argument("--block-size must be between 1 and 256, got " +
                            std::to_string(block_size));
  KVS_RETURN_IF_ERROR(kv_vector_bytes_checked(k, spec.head_dim).status());
  KVS_RETURN_IF_ERROR(kv_vector_bytes_checked(v, spec.head_dim).status());
  KvPoolInfo p;
  p.token_bytes = kv_token_bytes(spec.kv_shape(k, v));
  p.block_size = block_size;
  p.block_bytes = p.token_bytes.bytes_per_token * block_size;
  const uint64_t blocks = memory / p.block_bytes;
  if (blocks == 0)
    return invalid_argument("--kv-cache-memory " + std::to_string(memory) +
                            " B holds no block: one block of " + std::to_string(block_size) +
                            " tokens needs " + std::to_string(p.block_bytes) + " B");
  if (blocks > (uint64_t{1} << 31)) return invalid_argument("--kv-cache-memory is too large");
  p.num_blocks = static_cast<uint32_t>(blocks);
  p.num_tokens = blocks * block_size;
  p.pool_bytes = blocks * p.block_bytes;
  return p;
}

namespace {
uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}
}  // namespace

Engine::Engine(LlamaModel& model, const EngineConfig& config)
    : model_(model),
      config_(config),
      scheduler_(SchedulerConfig{.max_num_batched_tokens = config.max_num_batched_tokens,
                                 .max_num_seqs = config.max_num_seqs,
                                 .preemption_mode = config.preemption_mode,
                                 .swap_space_bytes = config.swap_space}) {}

Result<std::unique_ptr<Engine>> Engine::create(LlamaModel& model, const EngineConfig& config) {
  if (!kv_dtype_supported_by_kernels(config.k_dtype) ||
      !kv_dtype_supported_by_kernels(config.v_dtype))
    return unimplemented(std::string("KV cache dtype ") + kv_dtype_name(config.k_dtype) + "/" +
                         kv_dtype_name(config.v_dtype) +
                         " is not supported by the attention kernels yet (use f16, bf16 or f32)");
  if (config.max_num_batched_tokens == 0)
    return invalid_argument("--max-num-batched-tokens must be positive");
  if (config.max_num_seqs == 0) return invalid_argument("--max-num-seqs must be positive");
  const ModelSpec& spec = model.spec();
  KVS_ASSIGN_OR_RETURN(KvPoolInfo info,
                       size_kv_pool(spec, config.kv_cache_memory, config.block_size, config.k_dtype,
                                    config.v_dtype));
  std::unique_ptr<Engine> e(new Engine(model, config));
  e->pool_info_ = info;
  e->max_model_len_ = config.max_model_len ? config.max_model_len : spec.context_length;
  e->pool_ = std::make_unique<ThreadPool>(config.threads > 0 ? config.threads
                                                             : ThreadPool::hardware_threads());
  KVS_ASSIGN_OR_RETURN(KvBlockStorage storage,
                       KvBlockStorage::create({.num_blocks = info.num_blocks,
                                               .block_size = config.block_size,
                                               .layers = spec.n_layers,
                                               .kv_heads = spec.n_kv_heads,
                                               .head_dim = spec.head_dim,
                                               .k_dtype = config.k_dtype,
                                               .v_dtype = config.v_dtype}));
  KVS_CHECK(storage.block_bytes() == info.block_bytes);
  e->storage_ = std::make_unique<KvBlockStorage>(std::move(storage));
  e->scheduler_.attach_storage(e->storage_.get());
  e->cache_ = std::make_unique<KvCacheManager>(
      KvCacheConfig{.num_blocks = info.num_blocks,
                    .block_size = config.block_size,
                    .enable_prefix_caching = config.enable_prefix_caching,
                    .model_fingerprint = config.model_fingerprint,
                    .hash_seed = config.prefix_hash_seed ? *config.prefix_hash_seed
                                                         : random_seed(),
                    .k_dtype = config.k_dtype,
                    .v_dtype = config.v_dtype});
  e->runner_ = std::make_unique<ModelRunner>(model, *e->storage_, *e->pool_);
  return e;
}

Result<SeqId> Engine::add_request(SequenceRequest req) {
  if (req.prompt.empty()) return invalid_argument("the prompt is empty");
  if (req.max_tokens == 0) return invalid_argument("max_tokens must be at least 1");
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
  if (total > pool_info_.num_tokens)
    return resource_exhausted(
        "prompt + max_tokens = " + std::to_string(total) + " tokens cannot fit in the KV pool of " +
        std::to_string(pool_info_.num_tokens) + " tokens (raise --kv-cache-memory)");
  const SeqId id{next_id_++};
  auto seq = std::make_unique<Sequence>(id, std::move(req));
  scheduler_.add(seq.get());
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
    scheduler_.add_running(child.get());
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

void Engine::abort(SeqId id) {
  auto it = seqs_.find(id.value);
  if (it == seqs_.end() || it->second->status == SeqStatus::kFinished) return;
  finish(*it->second, FinishReason::kAbort);
  scheduler_.remove_finished();
}

void Engine::release(SeqId id) {
  auto it = seqs_.find(id.value);
  if (it == seqs_.end()) return;
  KVS_CHECK_MSG(it->second->status == SeqStatus::kFinished, "release() of a live sequence");
  seqs_.erase(it);
}

std::vector<StepOutput> Engine::step() {
  std::vector<StepOutput> out;
  copies_.clear();
  const std::vector<ScheduledChunk> plan = scheduler_.schedule(*cache_, &copies_);
  if (plan.empty()) return out;
  // Block copies and swapped-in KV, in the order the scheduler queued them; then the forward
  // pass writes the step's new KV.
  scheduler_.apply_copies_and_swap_ins(copies_);
  chunks_.clear();
  bool has_prefill = false;
  for (const ScheduledChunk& c : plan) {
    has_prefill |= c.seq->num_computed < c.seq->prompt_len;
    Sequence& s = *c.seq;
    const bool reaches_end = s.num_computed + c.num_tokens == s.tokens.size();
    chunks_.push_back(
        {.seq = s.id,
         .tokens = std::span<const int32_t>(s.tokens).subspan(s.num_computed, c.num_tokens),
         .start_pos = s.num_computed,
         .all_logits = false,
         .last_logits = reaches_end});
  }
  const auto t0 = Clock::now();
  std::span<const float> logits = runner_->run(*cache_, chunks_, {});
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  counters_.forward_seconds += seconds;
  (has_prefill ? counters_.prefill_step_seconds : counters_.decode_step_seconds) += seconds;
  ++counters_.steps;
  counters_.peak_blocks_in_use =
      std::max(counters_.peak_blocks_in_use, cache_->stats().blocks_in_use);
  const size_t vocab = model_.spec().vocab_size;
  size_t row = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    cache_->commit_tokens(s.id, chunks_[i].tokens);
    if (s.num_computed < s.prompt_len)
      counters_.prompt_tokens_computed +=
          std::min(s.prompt_len, s.num_computed + plan[i].num_tokens) - s.num_computed;
    s.num_computed += plan[i].num_tokens;
    if (!chunks_[i].last_logits) continue;
    const float* row_logits = logits.data() + row * vocab;
    ++row;
    // n > 1: the prompt is prefilled and committed, so the children share all its blocks; each
    // samples its first token from the same logits with its own seed.
    if (s.pending_forks > 0 && s.num_generated() == 0) fork_children(s);
    for (Sequence* c : forked_) sample_into(*c, row_logits, has_prefill, &out);
    forked_.clear();
    sample_into(s, row_logits, has_prefill, &out);
  }
  scheduler_.remove_finished();
  return out;
}

}  // namespace kvs
