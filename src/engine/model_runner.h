// ModelRunner: runs one step's forward pass. It consumes the scheduled chunks (which tokens of
// which sequence) and the StepInputs the cache manager built once for the step (slot mapping,
// block tables, context lengths), flattens them into a ForwardBatch and returns the logits the
// step needs: one row for a chunk that reaches the end of its sequence (the next token is
// sampled from it), or one row per scored position of a prompt being scored (perplexity).
// It moves no KV bytes other than the forward pass's own writes (transfers ran before).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "engine/scheduler.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "model/transformer_model.h"

namespace kvs {

struct StepLogits {
  // Row-major [rows][vocab]; chunk i's rows are [row_begin[i], row_begin[i + 1]), one per
  // position of logits_positions(...) in order.
  std::span<const float> logits;
  std::span<const uint32_t> row_begin;  // [chunks + 1]
};

class ModelRunner {
 public:
  ModelRunner(TransformerModel& model, KvBlockStorage& storage, ThreadPool& threads)
      : model_(model), storage_(storage), threads_(threads) {}

  // `inputs` = KvCacheManager::build_step_inputs of the chunks' rows, in chunk order.
  StepLogits run(std::span<const ScheduledChunk> chunks, const StepInputs& inputs);

 private:
  TransformerModel& model_;
  KvBlockStorage& storage_;
  ThreadPool& threads_;
  // Step arrays, reused across steps.
  std::vector<int32_t> tokens_, positions_, context_len_, logits_rows_;
  std::vector<const uint32_t*> tables_;
  std::vector<uint32_t> row_begin_;
  std::vector<float> logits_;
};

}  // namespace kvs
