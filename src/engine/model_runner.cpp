#include "engine/model_runner.h"

namespace kvs {

std::span<const float> ModelRunner::run(const KvCacheManager& cache,
                                        std::span<const RunnerChunk> chunks,
                                        std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) storage_.copy_tokens(c.src.value, c.dst.value, c.num_tokens);
  tokens_.clear();
  positions_.clear();
  context_len_.clear();
  logits_rows_.clear();
  slots_.clear();
  tables_.clear();
  if (table_storage_.size() < chunks.size()) table_storage_.resize(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    const RunnerChunk& ch = chunks[c];
    std::span<const BlockId> blocks = cache.block_table(ch.seq);
    std::vector<uint32_t>& table = table_storage_[c];
    table.resize(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) table[i] = blocks[i].value;
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      const uint32_t pos = ch.start_pos + static_cast<uint32_t>(i);
      if (ch.all_logits || (ch.last_logits && i + 1 == ch.tokens.size()))
        logits_rows_.push_back(static_cast<int32_t>(tokens_.size()));
      tokens_.push_back(ch.tokens[i]);
      positions_.push_back(static_cast<int32_t>(pos));
      context_len_.push_back(static_cast<int32_t>(pos + 1));
      slots_.push_back(static_cast<int64_t>(cache.slot(ch.seq, pos)));
      tables_.push_back(table.data());
    }
  }
  const int64_t vocab = model_.spec().vocab_size;
  logits_.resize(logits_rows_.size() * vocab);
  const ForwardBatch batch{.num_tokens = static_cast<int64_t>(tokens_.size()),
                           .tokens = tokens_.data(),
                           .positions = positions_.data(),
                           .slot_mapping = slots_.data(),
                           .context_len = context_len_.data(),
                           .block_table = tables_.data(),
                           .num_logits = static_cast<int64_t>(logits_rows_.size()),
                           .logits_rows = logits_rows_.data()};
  model_.forward(batch, storage_.layout(), pool_, logits_.data());
  return logits_;
}

}  // namespace kvs
