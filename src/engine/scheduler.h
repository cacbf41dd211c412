// Scheduler: decides which sequences advance in the next step and by how many tokens, and which
// KV bytes must move before the forward pass. It moves no bytes itself: its answer is a
// StepPlan (chunks + an ordered list of KvTransfers) that the engine executes.
//
// Continuous batching under a token budget: running decodes first (one token each), then
// prefill chunks (chunked prefill, so a long prompt cannot stall running streams), then
// admission of waiting sequences in (priority, FCFS) order, each admission asking the cache
// manager's dry run whether its blocks fit (cached prefix blocks cost nothing). A sequence whose
// next prompt block is being computed by a running sequence waits for it (it will be a hit) and
// may be passed; one that does not fit blocks the rest (no overtaking).
//
// Priority follows vLLM: a LOWER number is MORE important. The waiting queue is ordered by
// (priority, arrival); a preempted sequence keeps its arrival, so it goes back ahead of newer
// requests of its priority.
//
// Preemption: when a running sequence needs a block and none is free, the victim is the
// least important running sequence not yet scheduled this step, the newest among equals
// (possibly the requester itself). Two modes:
//   recompute  free the victim's blocks (its full blocks stay in the prefix cache as
//              cached-free, so its re-admission often hits them) and requeue it from scratch;
//   swap       take one block of the host area (HostBlockPool) per device block, queue a
//              kSwapOut of each, free the device blocks; on re-admission take fresh blocks
//              (KvCacheManager::admit_restored) and queue a kSwapIn of each. Falls back to
//              recompute when the host area is full.
// Either way the victim's output is unchanged (the same tokens are recomputed or restored).
//
// Tiers (a TierPolicy, when attached): every cached block the cache manager evicts is handed to
// the tiers before that call's own copies are queued (its bytes are read first); an admission
// whose cached prefix ends early continues the lookup down the tiers, imports the hits into
// fresh cached blocks and queues their loads, so that admit() then hits them like any cached
// block; swap takes host blocks from the host tier's share when its own is used up. A prefix
// that continues on disk is read by the disk tier's loader thread first: meanwhile its sequence
// waits ("loading") and later ones may pass it, as with a prefix in flight.
// Transfers are queued in decision order, and executing them in that order is what makes the
// reuse of a just-freed block within the same step safe (kv_transfer.h).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "kvcache/kv_cache_manager.h"
#include "tiers/host_block_pool.h"
#include "tiers/kv_transfer.h"
#include "tiers/tier_policy.h"

namespace kvs {

enum class PreemptionMode : uint8_t { kRecompute, kSwap };

[[nodiscard]] const char* preemption_mode_name(PreemptionMode mode);
[[nodiscard]] Result<PreemptionMode> parse_preemption_mode(const std::string& name);
// invalid_argument for a recent-token window with swap preemption (the window's rows are not
// swapped); the engine and the simulator refuse the same configurations.
[[nodiscard]] Status check_window_preemption(uint32_t recent_window, PreemptionMode mode);

struct SchedulerConfig {
  uint32_t max_num_batched_tokens = 512;
  uint32_t max_num_seqs = 64;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  // `--kv-recent-window` tokens (quant/recent_window.h): prefix hits stop at each sequence's
  // window floor, and a preempted sequence is recomputed (its window is not swapped).
  uint32_t recent_window = 0;
  // How long a sequence waits for its disk or remote tier reads before it takes what is ready
  // and recomputes the rest (bounds the wait when a device or Redis is slow or hung).
  double max_tier_wait_seconds = 2.0;
};

struct ScheduledChunk {
  Sequence* seq;
  uint32_t num_tokens;  // tokens of seq computed this step, starting at seq->num_computed
};

// One step's decisions: the chunks to run and, before them, the bytes to move (in order).
struct StepPlan : KvTransferPlan {
  std::vector<ScheduledChunk> chunks;
  [[nodiscard]] bool empty() const { return chunks.empty(); }
};

// One preemption, for logs and metrics. `mode` is what actually happened (a swap that did not
// fit in the host area is a recompute). The event names the request and sample itself: by the
// time it is read the sequence may have been re-admitted, finished and released in the same
// step, so readers must not look the sequence up.
struct PreemptionEvent {
  SeqId seq;
  SeqId request;       // the request's first sequence (Sequence::parent, or seq itself)
  uint32_t index = 0;  // sample index within the request
  PreemptionMode mode = PreemptionMode::kRecompute;
  uint32_t blocks = 0;  // blocks the victim gave back
};

class Scheduler {
 public:
  // `host` is the host area swap mode uses (may have no blocks in recompute mode).
  Scheduler(const SchedulerConfig& config, KvCacheManager& cache, HostBlockPool& host)
      : config_(config), cache_(cache), host_(host) {}

  // Lower tiers (not owned; null = none).
  void attach_tiers(TierPolicy* tiers) { tiers_ = tiers; }
  // The measured prefill rate (tokens/s, 0 = unknown) the load-or-recompute choice compares with.
  void set_prefill_rate(double tokens_per_s) { prefill_tokens_per_s_ = tokens_per_s; }

  void add(Sequence* seq);
  // A sequence that already holds blocks (a forked child) joins the running set directly.
  void add_running(Sequence* seq) { running_.push_back(seq); }
  // Drops finished sequences (and the host blocks of finished swapped ones).
  void remove_finished();
  [[nodiscard]] bool empty() const { return waiting_.empty() && running_.empty(); }
  [[nodiscard]] size_t num_waiting() const { return waiting_.size(); }
  [[nodiscard]] size_t num_running() const { return running_.size(); }
  [[nodiscard]] size_t num_swapped() const { return swapped_.size(); }
  // Waiting sequences the last schedule() left waiting for disk-tier reads.
  [[nodiscard]] size_t num_loading() const { return num_loading_; }

  // Plans the next step: admits waiting sequences into the cache manager, reserves the slots of
  // every scheduled chunk and queues the transfers that must run before the forward pass.
  [[nodiscard]] StepPlan schedule();
  // Write-through and the remote tier: queues the copies down of the blocks that became cached
  // since the last call (the engine calls it after each step's commit, so that the blocks of a
  // request's last step reach the tiers without waiting for another step).
  void plan_completed_blocks(KvTransferPlan& plan);

  // Admissions whose prefix hit was not taken because the attention sink no longer knew the
  // prompt's first token (kvcache/start_token_table.h; the engine and the simulator alike).
  [[nodiscard]] uint64_t num_sink_refused_hits() const { return num_sink_refused_hits_; }
  [[nodiscard]] uint64_t num_preemptions() const {
    return num_preemptions_[0] + num_preemptions_[1];
  }
  [[nodiscard]] uint64_t num_preemptions(PreemptionMode mode) const {
    return num_preemptions_[static_cast<int>(mode)];
  }
  // Preemptions since the last call (for logging).
  [[nodiscard]] std::vector<PreemptionEvent> take_preemption_events();

 private:
  void preempt(Sequence* victim, StepPlan& plan);
  void enqueue_waiting(Sequence* seq);
  // Re-admits a swapped sequence and queues its swap-in; the tokens scheduled, or nullopt when
  // its blocks are not available.
  std::optional<uint32_t> admit_swapped(Sequence* s, uint32_t budget, StepPlan& plan);
  // After a cache manager call: hands its evicted cached blocks to the tiers, then appends its
  // block copies to the plan's transfers, in that order.
  void queue_cache_output(std::vector<BlockCopy>& copies, StepPlan& plan);
  void queue_tier_evictions(StepPlan& plan);
  // Continues s's cached prefix down the tiers: imports the hits into the cache and queues their
  // loads. kLoading: the prefix continues in disk extents being read; s waits ("loading").
  enum class TierImport : uint8_t { kNone, kImported, kLoading };
  TierImport import_from_tiers(Sequence* s, const AdmitPlan& ap, uint32_t max_cached,
                               uint32_t budget, StepPlan& plan);

  SchedulerConfig config_;
  KvCacheManager& cache_;
  HostBlockPool& host_;
  std::deque<Sequence*> waiting_;  // sorted by (priority, order)
  std::vector<Sequence*> running_;
  std::unordered_map<SeqId, std::vector<uint32_t>> swapped_;  // host blocks of swapped ones
  std::vector<BlockCopy> copies_;                             // scratch
  TierPolicy* tiers_ = nullptr;
  double prefill_tokens_per_s_ = 0;
  size_t num_loading_ = 0;
  uint64_t num_preemptions_[2] = {0, 0};
  uint64_t num_sink_refused_hits_ = 0;
  std::vector<PreemptionEvent> events_;
};

}  // namespace kvs
