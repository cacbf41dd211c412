// ModelRunner: runs one step's forward pass. It consumes the scheduled chunks (which tokens of
// which sequence) and the StepInputs the cache manager built once for the step (slot mapping,
// block tables, context lengths), flattens them into a ForwardBatch and returns the logits the
// step needs: one row for a chunk that reaches the end of its sequence (the next token is
// sampled from it), or one row per scored position of a prompt being scored (perplexity).
// It moves no KV bytes other than the forward pass's own writes (transfers ran before), and
// owns the recent-token window's rows when the pool has one (quant/recent_window.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "engine/scheduler.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "model/transformer_model.h"
#include "quant/recent_window.h"

namespace kvs {

struct StepLogits {
  // Row-major [rows][vocab]; chunk i's rows are [row_begin[i], row_begin[i + 1]), one per
  // position of logits_positions(...) in order.
  std::span<const float> logits;
  std::span<const uint32_t> row_begin;  // [chunks + 1]
};

class ModelRunner {
 public:
  // `recent`: the pool's recent-token window (kv_pool_plan.h: recent_window, one ring per slot);
  // null when the plan has no window.
  ModelRunner(TransformerModel& model, KvBlockStorage& storage, ThreadPool& threads,
              std::unique_ptr<RecentWindow> recent);

  // `inputs` = KvCacheManager::build_step_inputs of the chunks' rows, in chunk order;
  // `recent_slots` their sequences' recent-window slots (KvCacheManager::recent_slot), empty
  // without a window; `recent_changes` the slots' hand-overs (KvCacheManager::
  // take_recent_changes), applied in order before the forward pass; `start_rows` the attention
  // sink's copies (KvCacheManager::take_start_row_copies): adoptions before the forward pass
  // (after the hand-overs), publications after it.
  StepLogits run(std::span<const ScheduledChunk> chunks, const StepInputs& inputs,
                 std::span<const int32_t> recent_slots = {},
                 std::span<const RecentSlotChange> recent_changes = {},
                 std::span<const StartRowCopy> start_rows = {});

 private:
  TransformerModel& model_;
  KvBlockStorage& storage_;
  ThreadPool& threads_;
  std::unique_ptr<RecentWindow> recent_;
  // Step arrays, reused across steps.
  std::vector<int32_t> tokens_, positions_, context_len_, logits_rows_, recent_slot_, recent_floor_;
  std::vector<const uint32_t*> tables_;
  std::vector<uint32_t> row_begin_;
  std::vector<float> logits_;
};

}  // namespace kvs
