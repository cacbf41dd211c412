// Scheduler: decides which sequences advance in the next step and by how many tokens.
// Continuous batching under a token budget: running decodes first (one token each), then
// prefill chunks (chunked prefill, so a long prompt cannot stall running streams), then
// admission of waiting sequences in (priority, FCFS) order, each admission asking the cache
// manager's dry run whether its blocks fit (cached prefix blocks cost nothing).
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
//   swap       copy its blocks (whole, KvBlockStorage::read_block) into a host swap area of at
//              most swap_space_bytes, free them, and on re-admission take fresh blocks
//              (KvCacheManager::admit_restored) and write the bytes back before the forward
//              pass; falls back to recompute when the swap area is full.
// Either way the victim's output is unchanged (the same tokens are recomputed or restored).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"

namespace kvs {

enum class PreemptionMode : uint8_t { kRecompute, kSwap };

[[nodiscard]] const char* preemption_mode_name(PreemptionMode mode);
[[nodiscard]] Result<PreemptionMode> parse_preemption_mode(const std::string& name);

struct SchedulerConfig {
  uint32_t max_num_batched_tokens = 512;
  uint32_t max_num_seqs = 64;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  uint64_t swap_space_bytes = 0;  // host bytes for swapped-out blocks (swap mode)
};

struct ScheduledChunk {
  Sequence* seq;
  uint32_t num_tokens;  // tokens of seq computed this step, starting at seq->num_computed
};

// One preemption, for logs and metrics. `mode` is what actually happened (a swap that did not
// fit in the swap area is a recompute). The event names the request and sample itself: by the
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
  explicit Scheduler(const SchedulerConfig& config) : config_(config) {}

  // The KV bytes the swap mode copies (needed for kSwap; may stay null for kRecompute).
  void attach_storage(KvBlockStorage* storage) { storage_ = storage; }

  void add(Sequence* seq);
  // A sequence that already holds blocks (a forked child) joins the running set directly.
  void add_running(Sequence* seq) { running_.push_back(seq); }
  // Drops finished sequences (and the swap copies of finished swapped ones).
  void remove_finished();
  [[nodiscard]] bool empty() const { return waiting_.empty() && running_.empty(); }
  [[nodiscard]] size_t num_waiting() const { return waiting_.size(); }
  [[nodiscard]] size_t num_running() const { return running_.size(); }
  [[nodiscard]] size_t num_swapped() const { return swapped_.size(); }
  [[nodiscard]] uint64_t swap_used_bytes() const { return swap_used_; }

  // Plans the next step. Admits waiting sequences into the cache (manager.admit or, for a
  // swapped one, manager.admit_restored) and reserves the slots of every scheduled chunk
  // (manager.append_slots), collecting block copies that must be performed before the forward
  // pass. Swap-ins are queued between those copies: call apply_copies_and_swap_ins().
  std::vector<ScheduledChunk> schedule(KvCacheManager& cache, std::vector<BlockCopy>* copies);
  // Performs `copies` (the list schedule() filled) and writes the KV of the sequences swapped
  // in, in the order schedule() queued them: a copy queued before a swap-in may read a
  // cached-free block that the swap-in's allocation recycled (so it must run first), and a copy
  // queued after it may read a swapped-in block that became a prefix-cache entry (so it must
  // run after the write).
  void apply_copies_and_swap_ins(std::span<const BlockCopy> copies);

  [[nodiscard]] uint64_t num_preemptions() const {
    return num_preemptions_[0] + num_preemptions_[1];
  }
  [[nodiscard]] uint64_t num_preemptions(PreemptionMode mode) const {
    return num_preemptions_[static_cast<int>(mode)];
  }
  // Preemptions since the last call (for logging).
  [[nodiscard]] std::vector<PreemptionEvent> take_preemption_events();

 private:
  struct SwapEntry {
    std::vector<uint8_t> bytes;  // [blocks][block_bytes]
    uint32_t num_blocks = 0;
  };
  struct PendingSwapIn {
    SwapEntry entry;
    std::vector<BlockId> blocks;
    size_t copies_before = 0;  // copies queued before this swap-in
  };

  void preempt(KvCacheManager& cache, Sequence* victim);
  void enqueue_waiting(Sequence* seq);
  bool admit_swapped(KvCacheManager& cache, Sequence* s, uint32_t budget, uint32_t* n,
                     size_t copies_before);

  SchedulerConfig config_;
  KvBlockStorage* storage_ = nullptr;
  std::deque<Sequence*> waiting_;  // sorted by (priority, order)
  std::vector<Sequence*> running_;
  std::unordered_map<SeqId, SwapEntry> swapped_;
  std::vector<PendingSwapIn> pending_swap_ins_;
  uint64_t swap_used_ = 0;
  uint64_t num_preemptions_[2] = {0, 0};
  std::vector<PreemptionEvent> events_;
};

}  // namespace kvs
