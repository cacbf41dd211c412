// Engine: the step loop. Each step the scheduler picks chunks, the cache manager has already
// reserved their slots, the model runner runs one batched forward pass, the sampler picks next
// tokens, and finished sequences give their blocks back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_geometry.h"
#include "model/llama_model.h"

namespace kvs {

struct EngineConfig {
  uint64_t kv_cache_memory = uint64_t{512} << 20;  // bytes for the KV pool
  uint32_t block_size = 16;                        // tokens per block, 1..256
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  int threads = 0;  // 0 = all hardware threads
  uint32_t max_num_batched_tokens = 512;
  uint32_t max_num_seqs = 64;
  bool enable_prefix_caching = true;
  uint32_t max_model_len = 0;  // 0 = the model's trained context length
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  uint64_t swap_space = 0;         // host bytes for swapped-out KV blocks (swap mode)
  uint64_t model_fingerprint = 0;  // mixed into prefix-cache keys
  // Seed of the in-memory prefix-cache keys; unset = drawn at random when the engine is created,
  // so no client can predict keys or craft collisions.
  std::optional<uint64_t> prefix_hash_seed;
  std::vector<int32_t> eog_ids;    // tokens that end generation
};

// How the pool is sized from the memory budget (kv_geometry's bytes per token x block size).
struct KvPoolInfo {
  KvTokenBytes token_bytes;
  uint32_t block_size = 0;
  uint64_t block_bytes = 0;
  uint32_t num_blocks = 0;
  uint64_t num_tokens = 0;
  uint64_t pool_bytes = 0;
};

// num_blocks = floor(kv_cache_memory / (block_size x bytes_per_token)); fails when not even
// one block fits.
[[nodiscard]] Result<KvPoolInfo> size_kv_pool(const ModelSpec& spec, uint64_t kv_cache_memory,
                                              uint32_t block_size, KvDtype k_dtype,
                                              KvDtype v_dtype);

struct StepOutput {
  SeqId seq{0};
  int32_t token = 0;
  bool finished = false;
};

struct EngineCounters {
  uint64_t steps = 0;
  uint64_t prompt_tokens_computed = 0;  // prefill tokens actually run (cache hits excluded)
  uint64_t generated_tokens = 0;
  double forward_seconds = 0;
  // Steps that ran any prompt token count as prefill steps; the rest are decode steps.
  double prefill_step_seconds = 0;
  double decode_step_seconds = 0;
  uint64_t decode_step_tokens = 0;  // tokens generated in decode steps
  uint32_t peak_blocks_in_use = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(LlamaModel& model, const EngineConfig& config);

  // Validates and queues a sequence: non-empty prompt of in-vocabulary ids, prompt + max_tokens
  // within max_model_len and within the whole pool, valid sampling parameters, 1 <= n <= kMaxSamplesPerRequest.
  // With n > 1 the returned id is sample 0; samples 1..n-1 are forked (copy-on-write) once the
  // prompt is prefilled and appear in step() outputs with Sequence::parent == the returned id.
  Result<SeqId> add_request(SequenceRequest request);
  // Runs one step; returns the token each advancing sequence produced.
  std::vector<StepOutput> step();
  [[nodiscard]] bool has_unfinished() const { return !scheduler_.empty(); }
  [[nodiscard]] const Sequence& sequence(SeqId id) const;
  // Stops a sequence (finished with kAbort) and frees its blocks.
  void abort(SeqId id);
  // Forgets a finished sequence.
  void release(SeqId id);

  [[nodiscard]] const EngineConfig& config() const { return config_; }
  [[nodiscard]] const KvPoolInfo& pool_info() const { return pool_info_; }
  [[nodiscard]] const EngineCounters& counters() const { return counters_; }
  [[nodiscard]] uint64_t num_preemptions() const { return scheduler_.num_preemptions(); }
  [[nodiscard]] uint64_t num_preemptions(PreemptionMode mode) const {
    return scheduler_.num_preemptions(mode);
  }
  // Preemptions since the last call (request id = Sequence::parent or the id, mode, blocks).
  [[nodiscard]] std::vector<PreemptionEvent> take_preemption_events() {
    return scheduler_.take_preemption_events();
  }
  [[nodiscard]] const Scheduler& scheduler() const { return scheduler_; }
  [[nodiscard]] KvCacheManager& cache() { return *cache_; }
  [[nodiscard]] KvBlockStorage& storage() { return *storage_; }
  [[nodiscard]] ModelRunner& runner() { return *runner_; }
  [[nodiscard]] ThreadPool& pool() { return *pool_; }
  [[nodiscard]] const LlamaModel& model() const { return model_; }
  [[nodiscard]] uint32_t max_model_len() const { return max_model_len_; }

 private:
  Engine(LlamaModel& model, const EngineConfig& config);
  void finish(Sequence& s, FinishReason reason);
  void fork_children(Sequence& parent);
  void sample_into(Sequence& s, const float* logits, bool has_prefill,
                   std::vector<StepOutput>* out);

  LlamaModel& model_;
  EngineConfig config_;
  uint32_t max_model_len_ = 0;
  KvPoolInfo pool_info_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvBlockStorage> storage_;
  std::unique_ptr<KvCacheManager> cache_;
  std::unique_ptr<ModelRunner> runner_;
  Scheduler scheduler_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  EngineCounters counters_;
  std::vector<BlockCopy> copies_;
  std::vector<RunnerChunk> chunks_;
  std::vector<Sequence*> forked_;
};

}  // namespace kvs
