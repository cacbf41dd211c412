// Engine: the model served over the paged KV cache. Its step is the one step of kvserve
// (step_driver.h: schedule -> transfer -> forward -> commit/sample, shared with the simulator),
// run over the model: the transfer executor moves block bytes (copies, swaps, tier loads and
// stores), the model runner runs the forward pass on the inputs the cache manager builds once,
// the sampler turns logits into tokens. Nothing below the scheduler decides, and the scheduler
// moves no bytes.
//
// Outside code reads the engine through snapshot(), block_infos(), tenant_stats(),
// for_each_block_table() and check_integrity(); the cache manager and scheduler stay inside.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/server_secret.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_driver.h"
#include "engine/step_log.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/kv_pool_plan.h"
#include "model/transformer_model.h"
#include "tiers/host_block_pool.h"
#include "tiers/kv_offload.h"
#include "tiers/kv_transfer_executor.h"

namespace kvs {

struct EngineConfig {
  uint64_t kv_cache_memory = uint64_t{512} << 20;  // bytes for the KV pool
  uint32_t block_size = 16;                        // tokens per block, 1..kMaxBlockSize
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  // `--kv-cache-dtype-k-layers`, `--kv-cache-dtype-v-layers`: layers whose K or V has its own
  // format (quant/kv_layer_formats.h); none by default.
  KvLayerFormats layer_formats;
  int threads = 0;  // 0 = all hardware threads
  uint32_t max_num_batched_tokens = 512;
  uint32_t max_num_seqs = 64;
  bool enable_prefix_caching = true;
  uint32_t max_model_len = 0;  // 0 = the model's trained context length
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  // `--kv-recent-window`: each running sequence's newest tokens kept in f16 beside the pool
  // (quant/recent_window.h); 0 = none. Needs recompute preemption.
  uint32_t recent_window = 0;
  // `--kv-recent-window-dtype`: the window's rows in f16 or int8 (about half the bytes).
  KvDtype recent_window_dtype = KvDtype::kF16;
  // `--kv-attention-sink`: every query reads position 0's K and V in f16 too
  // (quant/attention_sink.h). Needs a recent window.
  bool attention_sink = false;
  uint64_t swap_space = 0;         // host bytes for swapped-out KV blocks (swap mode)
  uint64_t model_fingerprint = 0;  // mixed into prefix-cache keys
  // Seed of the in-memory prefix-cache keys; unset = drawn at random when the engine is created,
  // so no client can predict keys or craft collisions.
  std::optional<uint64_t> prefix_hash_seed;
  std::vector<int32_t> eog_ids;  // tokens that end generation
  // Lower tiers under the pool (host RAM, disk); off by default. Their host share and swap's
  // are one host area.
  KvOffloadConfig offload;
  // Seconds a clean shutdown may spend writing the tiers' pending blocks to disk.
  double offload_flush_seconds = 10;
  // Record the prefix cache's changes for KV events (take_cache_events).
  bool kv_events = false;
  // The server secret (core/server_secret.h: --kv-tier-secret-file). Unset: the one kept in the
  // disk tier's directory when there is one (so a restart finds its own extents), else random
  // for this process.
  std::optional<ServerSecret> secret;
};

using EngineCounters = StepCounters;

// What the engine is doing now, read in O(1) (plus one scan of the block tables for the
// fragmentation, when asked).
struct EngineSnapshot {
  uint32_t running = 0, waiting = 0, swapped = 0;
  uint32_t loading = 0;  // of the waiting ones, those waiting for disk or remote tier reads
  uint64_t steps = 0;    // forward passes run
  KvCacheCounters cache;
  double fragmentation = 0;  // only when snapshot(true)
  uint64_t preemptions_recompute = 0, preemptions_swap = 0;
  // Prefix hits not taken because the attention sink had forgotten the first token.
  uint64_t attention_sink_refused_hits = 0;
  uint64_t swap_used_bytes = 0, swap_space_bytes = 0;
  uint64_t pool_bytes = 0, block_bytes = 0;
  uint64_t key_tail_bytes = 0;       // per-channel K formats' f16 tails (kv_pool_plan.h)
  uint64_t recent_window_bytes = 0;  // the recent-token window's rings (kv_pool_plan.h)
  KvOffloadStats offload;            // enabled == false when there are no tiers
  // The model's weights: as the file stores them, as they sit in memory (packed), and the load
  // time packing took (TransformerModel).
  uint64_t weight_file_bytes = 0, weight_resident_bytes = 0;
  double weight_pack_seconds = 0;
};

// One live sequence's blocks, one block table per layer group (what the dashboard lights up when
// a request is clicked). The views are valid only during the for_each_block_table callback.
struct SequenceBlocks {
  SeqId seq;
  SeqId request;                // the request's first sequence (Sequence::parent, or seq itself)
  uint32_t sample = 0;          // Sequence::index
  uint32_t num_tokens = 0;      // token slots appended (the last block may be partly filled)
  std::string_view cache_salt;  // the prefix-cache namespace (never shown as such)
  // Per layer group (kv_cache_groups.h), in block-table order: tables[0] is the first full
  // group's (a block per block_size tokens); a sliding group's released entries are
  // BlockId::invalid().
  std::vector<std::span<const BlockId>> tables;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(TransformerModel& model,
                                                const EngineConfig& config);
  // Writes what the disk tier would keep (KvOffload::persist), within offload_flush_seconds.
  ~Engine();

  // Checks and queues a request (StepDriver::add); samples 1..n-1 of n > 1 are forked
  // (copy-on-write) once the prompt is prefilled and appear in step() outputs with
  // StepOutput::request == the returned id.
  Result<SeqId> add_request(SequenceRequest request) { return driver_->add(std::move(request)); }
  // Runs one step; returns the token each advancing sequence produced.
  std::vector<StepOutput> step();
  [[nodiscard]] bool has_unfinished() const { return driver_->has_unfinished(); }
  [[nodiscard]] const Sequence& sequence(SeqId id) const { return driver_->sequence(id); }
  // Stops a sequence (finished with kAbort) and frees its blocks.
  void abort(SeqId id) { driver_->abort(id); }
  // Forgets a finished sequence.
  void release(SeqId id) { driver_->release(id); }
  // See StepDriver::set_stop_hook: a sampled token that completes a stop string ends its
  // sequence in the step, as EOS and length do.
  void set_stop_hook(std::function<bool(const Sequence&, int32_t token)> hook) {
    driver_->set_stop_hook(std::move(hook));
  }

  // Writes a line per step to `log` (not owned; null = none), in wall-clock time.
  void set_step_log(StepLog* log);

  // Called with the logits of the positions a scoring request scores (SequenceRequest::
  // score_from), after their negative log-likelihoods are added: `count` rows of `vocab` floats,
  // those of positions [first, first + count) of `s`. Empty = none (the default). The KL
  // divergence between two engines' KV formats reads them (engine/kl_divergence.h).
  using ScoreObserver = std::function<void(const Sequence& s, uint32_t first, uint32_t count,
                                           const float* logits, int64_t vocab)>;
  void set_score_observer(ScoreObserver observer) { score_observer_ = std::move(observer); }

  [[nodiscard]] const EngineConfig& config() const { return config_; }
  // The secret the tiers are keyed with (config.secret, or the one resolved at creation); the
  // server derives tenant identities from it too.
  [[nodiscard]] const ServerSecret& secret() const { return secret_; }
  [[nodiscard]] const KvPoolPlan& kv_pool() const { return kv_pool_; }
  [[nodiscard]] const EngineCounters& counters() const { return driver_->counters(); }
  [[nodiscard]] uint64_t num_preemptions() const { return driver_->scheduler().num_preemptions(); }
  [[nodiscard]] uint64_t num_preemptions(PreemptionMode mode) const {
    return driver_->scheduler().num_preemptions(mode);
  }
  // Preemptions since the last call (request id = Sequence::parent or the id, mode, blocks).
  // The pool's (L1's) prefix-cache changes since the last call, in order (config.kv_events):
  // blocks that became cached and blocks that left, named by their tier keys (tier_key.h).
  [[nodiscard]] std::vector<CacheEvent> take_cache_events() {
    return driver_->cache().take_cache_events();
  }
  // The same for the host tier (L2) and the disk tier (L3), when there are.
  [[nodiscard]] std::vector<CacheEvent> take_host_tier_events() {
    return offload_ != nullptr ? offload_->take_host_events() : std::vector<CacheEvent>{};
  }
  // The host and disk tiers' blocks by tier key (empty without the tier).
  [[nodiscard]] std::vector<uint64_t> host_tier_block_hashes() const {
    return offload_ != nullptr ? offload_->host_block_hashes() : std::vector<uint64_t>{};
  }
  [[nodiscard]] std::vector<uint64_t> disk_tier_block_hashes() const {
    return offload_ != nullptr ? offload_->disk_block_hashes() : std::vector<uint64_t>{};
  }
  [[nodiscard]] std::vector<CacheEvent> take_disk_tier_events() {
    return offload_ != nullptr ? offload_->take_disk_events() : std::vector<CacheEvent>{};
  }
  [[nodiscard]] std::vector<PreemptionEvent> take_preemption_events() {
    return driver_->scheduler().take_preemption_events();
  }
  [[nodiscard]] const TransformerModel& model() const { return model_; }
  [[nodiscard]] int num_threads() const { return threads_->num_threads(); }
  // Parallel regions the forward passes have run (ThreadPool::regions): a cost per step that
  // grows with the layers, whatever the batch.
  [[nodiscard]] uint64_t parallel_regions() const { return threads_->regions(); }
  [[nodiscard]] uint32_t max_model_len() const { return max_model_len_; }

  // ---- the read-only facade for servers and tools ----
  [[nodiscard]] EngineSnapshot snapshot(bool with_fragmentation = false) const;
  [[nodiscard]] std::vector<BlockInfo> block_infos() const {
    return driver_->cache().block_infos();
  }
  [[nodiscard]] std::vector<TenantStats> tenant_stats() const {
    return driver_->cache().tenant_stats();
  }
  // Calls fn for every sequence that holds blocks (running ones; a swapped or recompute-
  // preempted sequence holds none), in no particular order. O(sequences + table entries).
  void for_each_block_table(const std::function<void(const SequenceBlocks&)>& fn) const;
  // The cache manager's and the host area's integrity checks.
  [[nodiscard]] Status check_integrity() const;
  // See KvCacheManager::forget_idle_tenants.
  uint32_t forget_idle_tenants(double now, double idle_seconds) {
    return driver_->cache().forget_idle_tenants(now, idle_seconds);
  }

 private:
  class ModelBackend;
  Engine(TransformerModel& model, const EngineConfig& config, const KvPoolPlan& pool);

  TransformerModel& model_;
  EngineConfig config_;
  ServerSecret secret_;
  KvPoolPlan kv_pool_;
  uint32_t max_model_len_ = 0;
  std::unique_ptr<ThreadPool> threads_;
  std::unique_ptr<KvBlockStorage> storage_;       // the device pool's bytes
  std::unique_ptr<KvBlockStorage> host_storage_;  // the host area's bytes: swap + host tier
  std::unique_ptr<StepDriver> driver_;            // cache manager, host area, scheduler, sequences
  std::unique_ptr<KvOffload> offload_;            // null without tiers
  std::unique_ptr<KvTransferExecutor> transfers_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<ModelBackend> backend_;
  ScoreObserver score_observer_;
};

}  // namespace kvs
