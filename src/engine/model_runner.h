// ModelRunner: turns a step's scheduled chunks into one flat ForwardBatch (tokens, positions,
// slot mapping, block tables, context lengths), performs the cache manager's pending block
// copies on the KV storage, runs the model and returns one logits row per sequence that needs
// a next token (or every row, for perplexity).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_cache_manager.h"
#include "model/llama_model.h"

namespace kvs {

struct RunnerChunk {
  SeqId seq{0};
  std::span<const int32_t> tokens;  // the chunk's tokens
  uint32_t start_pos = 0;           // position of tokens[0] in the sequence
  bool all_logits = false;          // logits for every token of the chunk (perplexity)
  bool last_logits = false;         // logits for the chunk's last token (next-token sampling)
};

class ModelRunner {
 public:
  ModelRunner(LlamaModel& model, KvBlockStorage& storage, ThreadPool& pool)
      : model_(model), storage_(storage), pool_(pool) {}

  // Executes the copies, then the forward pass. Returns the logits, row-major
  // [rows][vocab], rows in chunk order (all_logits chunks contribute one row per token).
  std::span<const float> run(const KvCacheManager& cache, std::span<const RunnerChunk> chunks,
                             std::span<const BlockCopy> copies);

 private:
  LlamaModel& model_;
  KvBlockStorage& storage_;
  ThreadPool& pool_;
  // Step inputs, reused across steps.
  std::vector<int32_t> tokens_, positions_, context_len_, logits_rows_;
  std::vector<int64_t> slots_;
  std::vector<const uint32_t*> tables_;
  std::vector<std::vector<uint32_t>> table_storage_;
  std::vector<float> logits_;
};

}  // namespace kvs
