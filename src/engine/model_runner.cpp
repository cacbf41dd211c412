#include "engine/model_runner.h"

#include <algorithm>

namespace kvs {

ModelRunner::ModelRunner(TransformerModel& model, KvBlockStorage& storage, ThreadPool& threads,
                         std::unique_ptr<RecentWindow> recent)
    : model_(model), storage_(storage), threads_(threads), recent_(std::move(recent)) {}

StepLogits ModelRunner::run(std::span<const ScheduledChunk> chunks, const StepInputs& inputs,
                            std::span<const int32_t> recent_slots,
                            std::span<const RecentSlotChange> recent_changes,
                            std::span<const StartRowCopy> start_rows) {
  AttentionSink* sink = recent_ != nullptr ? recent_->sink() : nullptr;
  if (recent_ != nullptr) {
    KVS_CHECK(recent_slots.size() == chunks.size());
    for (const RecentSlotChange& c : recent_changes) {
      if (c.copy_from < 0)
        recent_->reset_slot(c.slot);
      else
        recent_->copy_slot(static_cast<uint32_t>(c.copy_from), c.slot);
    }
  }
  // A sequence that starts from a prefix hit takes its first token's sink rows from the table.
  KVS_CHECK(sink != nullptr || start_rows.empty());
  for (const StartRowCopy& c : start_rows)
    if (!c.publish) sink->adopt(c.slot, c.entry);
  recent_slot_.clear();
  recent_floor_.clear();
  tokens_.clear();
  positions_.clear();
  context_len_.clear();
  logits_rows_.clear();
  tables_.clear();
  row_begin_.assign(1, 0);
  KVS_CHECK(inputs.context_lens.size() == chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Sequence& s = *chunks[c].seq;
    const uint32_t start = s.num_computed, n = chunks[c].num_tokens;
    const LogitsPositions lp = logits_positions(s, start, n);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t pos = start + i;
      if (pos >= lp.first && pos < lp.first + lp.count)
        logits_rows_.push_back(static_cast<int32_t>(tokens_.size()));
      tokens_.push_back(s.tokens[pos]);
      positions_.push_back(static_cast<int32_t>(pos));
      context_len_.push_back(static_cast<int32_t>(pos + 1));
    }
    if (recent_ != nullptr) {
      recent_slot_.insert(recent_slot_.end(), n, recent_slots[c]);
      recent_floor_.insert(recent_floor_.end(), n,
                           static_cast<int32_t>(recent_window_floor(s, recent_->tokens())));
    }
    row_begin_.push_back(static_cast<uint32_t>(logits_rows_.size()));
  }
  KVS_CHECK(inputs.num_tokens == tokens_.size());
  // Each token's block table in each layer group: [groups][tokens].
  for (uint32_t g = 0; g < inputs.num_groups; ++g)
    for (size_t c = 0; c < chunks.size(); ++c)
      tables_.insert(tables_.end(), chunks[c].num_tokens, inputs.table(g, c));
  const int64_t vocab = model_.spec().vocab_size;
  logits_.resize(logits_rows_.size() * vocab);
  const ForwardBatch batch{.num_tokens = static_cast<int64_t>(tokens_.size()),
                           .tokens = tokens_.data(),
                           .positions = positions_.data(),
                           .num_groups = inputs.num_groups,
                           .slot_mapping = inputs.slot_mapping.data(),
                           .context_len = context_len_.data(),
                           .block_table = tables_.data(),
                           .recent_slot = recent_ != nullptr ? recent_slot_.data() : nullptr,
                           .recent_floor = recent_ != nullptr ? recent_floor_.data() : nullptr,
                           .num_logits = static_cast<int64_t>(logits_rows_.size()),
                           .logits_rows = logits_rows_.data()};
  PagedKvLayout kv = storage_.layout();
  kv.recent = recent_.get();
  model_.forward(batch, kv, threads_, logits_.data());
  // Sequences that computed position 0 publish its rows into their first token's entry.
  for (const StartRowCopy& c : start_rows)
    if (c.publish) sink->publish(c.slot, c.entry);
  return {.logits = logits_, .row_begin = row_begin_};
}

}  // namespace kvs
