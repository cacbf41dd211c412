// StartTokenTable: which first tokens the attention sink (quant/attention_sink.h) holds rows for.
// Pure accounting, like RecentWindowSlots: the scheduler asks it whether a prefix hit may be
// taken, and it decides which table entry a sequence copies its rows from (adopt) or into
// (publish); the model runner only moves the bytes it is told to. The engine and the simulator
// run the same step (engine/step_driver.h) over it, so both refuse the same hits.
//
// Why a hit needs the table: with the sink, position 0's K and V in every layer are a function
// of the first token alone, and a sequence whose first block comes from the prefix cache (or a
// tier) does not compute them: it copies them from the entry of its first token. The table has
// as many entries as the sink has slots (--max-num-seqs) and forgets its least recently used
// token when a new one is published into a full table.
//
// Timing within a step: adoptions are copied before the forward pass and publications written
// after it, so an entry published this step is not known (no hit may adopt it) until the step's
// rows are written (rows_written()), and an entry adopted this step may be overwritten by a
// publication of the same step (its rows were copied first).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kvs {

// One copy of a slot's sink rows for the model runner: an adoption (the entry's rows into the
// slot) before the step's forward pass, or a publication (the slot's rows into the entry) after.
struct StartRowCopy {
  uint32_t slot = 0;
  uint32_t entry = 0;
  bool publish = false;
  friend bool operator==(const StartRowCopy&, const StartRowCopy&) = default;
};

class StartTokenTable {
 public:
  explicit StartTokenTable(uint32_t entries);

  [[nodiscard]] uint32_t num_entries() const { return static_cast<uint32_t>(token_.size()); }
  // A written entry holds token's rows (token < 0 is never known).
  [[nodiscard]] bool knows(int32_t token) const;
  // The entry of a known token, marked used (CHECKs knows(token)).
  uint32_t adopt(int32_t token);
  // A sequence computes position 0 of `token` this step: the entry its rows go into after the
  // forward pass (an empty one, else the least recently used written one, whose token is
  // forgotten now), or nullopt when the table knows the token already or another publication of
  // this step writes it (the rows would be the same bytes). CHECKs token >= 0.
  std::optional<uint32_t> publish(int32_t token);
  // The step's publications are written: their tokens are known from now on.
  void rows_written();

  // The known tokens, least recently used first (tests).
  [[nodiscard]] std::vector<int32_t> tokens_by_use() const;
  // Every token is in at most one entry, every used entry has a distinct use stamp, and only
  // entries being written this step are pending.
  [[nodiscard]] bool check_integrity() const;

 private:
  [[nodiscard]] int32_t entry_of(int32_t token) const;

  std::vector<int32_t> token_;    // per entry; -1 = empty
  std::vector<uint64_t> used_;    // per entry: its last use (a counter), 0 = empty
  std::vector<uint8_t> pending_;  // per entry: written after this step's forward pass
  uint64_t clock_ = 0;
};

}  // namespace kvs
