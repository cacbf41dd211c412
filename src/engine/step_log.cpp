#include "engine/step_log.h"

#include <cerrno>
#include <cstring>

namespace kvs {

namespace {

void append(std::string* s, const char* fmt, auto... args) {
  char buf[96];
  const int n = std::snprintf(buf, sizeof(buf), fmt, args...);
  s->append(buf, static_cast<size_t>(n));
}

}  // namespace

void add_step_chunks(const StepPlan& plan, StepLogEntry* entry) {
  for (const ScheduledChunk& c : plan.chunks) {
    const Sequence& s = *c.seq;
    entry->chunks.push_back({.seq = s.id.value,
                             .first_pos = s.num_computed,
                             .num_tokens = c.num_tokens,
                             .prompt_len = s.prompt_len,
                             .samples = s.num_computed + c.num_tokens == s.tokens.size()});
  }
}

Result<std::unique_ptr<StepLog>> StepLog::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return io_error("step log " + path + ": " + std::strerror(errno));
  return std::unique_ptr<StepLog>(new StepLog(f, path));
}

StepLog::~StepLog() { (void)close(); }

void StepLog::write(const StepLogEntry& e) {
  if (file_ == nullptr || failed_) return;
  line_.clear();
  // %.6f: microseconds, enough for steps of a millisecond and more on an epoch clock.
  append(&line_, "{\"start_s\":%.6f,\"end_s\":%.6f", e.start_s, e.end_s);
  append(&line_, ",\"running\":%u,\"waiting\":%u", e.running, e.waiting);
  append(&line_, ",\"preempted_recompute\":%u,\"preempted_swap\":%u", e.preempted_recompute,
         e.preempted_swap);
  append(&line_, ",\"blocks_in_use\":%u,\"blocks_cached_free\":%u", e.blocks_in_use,
         e.blocks_cached_free);
  line_ += ",\"chunks\":[";
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    const StepLogChunk& c = e.chunks[i];
    append(&line_, "%s[%llu,%u,%u,%u,%d]", i == 0 ? "" : ",",
           static_cast<unsigned long long>(c.seq), c.first_pos, c.num_tokens, c.prompt_len,
           c.samples ? 1 : 0);
  }
  line_ += "]}\n";
  if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size()) failed_ = true;
}

Status StepLog::close() {
  if (file_ == nullptr) return Status::ok();
  const bool close_failed = std::fclose(file_) != 0;
  file_ = nullptr;
  if (failed_ || close_failed) return io_error("step log " + path_ + ": write failed");
  return Status::ok();
}

}  // namespace kvs
