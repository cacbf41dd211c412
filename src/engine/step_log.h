// StepLog: one JSON line per engine step, so that a real run and its simulation can be compared
// step by step. `kvserve serve --step-log FILE` writes it in wall-clock time (seconds since the
// Unix epoch), `kvserve simulate --step-log FILE` in the trace's virtual time; the two use this
// one writer and so one format:
//
//   {"start_s":..,"end_s":..,"running":R,"waiting":W,"preempted_recompute":P,
//    "preempted_swap":S,"blocks_in_use":U,"blocks_cached_free":F,
//    "chunks":[[seq,first_pos,num_tokens,prompt_len,samples],...]}
//
// A chunk is what the step computed for one sequence: num_tokens positions from first_pos;
// `samples` is 1 when the chunk reaches the sequence's end (a token is sampled). running and
// waiting are counted after scheduling, blocks after the step. bench/replay_trace.py --step-logs
// reads both files; build/bench/sim_calibrate --score predicts a log's steps with a device file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/scheduler.h"

namespace kvs {

struct StepLogChunk {
  uint64_t seq = 0;
  uint32_t first_pos = 0;
  uint32_t num_tokens = 0;
  uint32_t prompt_len = 0;
  bool samples = false;
};

struct StepLogEntry {
  double start_s = 0;
  double end_s = 0;
  uint32_t running = 0;
  uint32_t waiting = 0;
  uint32_t preempted_recompute = 0;
  uint32_t preempted_swap = 0;
  uint32_t blocks_in_use = 0;
  uint32_t blocks_cached_free = 0;
  std::vector<StepLogChunk> chunks;
};

// The plan's chunks, read before the step commits them (first_pos = the sequence's
// num_computed then).
void add_step_chunks(const StepPlan& plan, StepLogEntry* entry);

class StepLog {
 public:
  // Creates (truncates) the file.
  static Result<std::unique_ptr<StepLog>> open(const std::string& path);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // Appends one line; a write error is remembered and reported by close().
  void write(const StepLogEntry& entry);
  // Flushes and closes; the first write or close error, if any.
  Status close();

 private:
  StepLog(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  std::FILE* file_ = nullptr;
  std::string path_;
  bool failed_ = false;
  std::string line_;
};

}  // namespace kvs
