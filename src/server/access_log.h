// AccessLog: one line per request on the generation routes, as an operator reads them: who
// (the tenant's label, never a key or a prompt), which route, the HTTP status, prompt / cached /
// output tokens, time to first token and total time. `--log-format text|json` chooses the line's
// shape, `--log-level` what is logged at all: access lines are `info`, warnings (an unknown
// request field) `warning`, so `--log-level warning` keeps only those.
//
// The prompt text never appears: a line holds counts and times, the request id, the route and
// the tenant label. Lines are written whole under a lock, so threads never interleave.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvs {

enum class LogFormat { kText, kJson };
enum class LogLevel { kDebug, kInfo, kWarning, kError };

[[nodiscard]] Result<LogFormat> parse_log_format(std::string_view s);
[[nodiscard]] Result<LogLevel> parse_log_level(std::string_view s);

struct AccessRecord {
  std::string request_id;  // "cmpl-7"; "-" when refused before one was given
  std::string tenant;      // the tenant's label (TenantLabeler), "none" without keys
  std::string route;
  int status = 200;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t output_tokens = 0;
  std::optional<double> ttft_s;  // unset: no token was produced
  double total_s = 0;
  std::string outcome;  // "ok", "client_gone", or the error's code / type
};

class AccessLog {
 public:
  explicit AccessLog(LogFormat format = LogFormat::kText, LogLevel level = LogLevel::kInfo,
                     std::FILE* out = stderr)
      : format_(format), level_(level), out_(out) {}

  [[nodiscard]] bool enabled(LogLevel l) const { return l >= level_; }
  void request(const AccessRecord& r);
  // A server message at `level` (a warning, an error), in the same format.
  void message(LogLevel level, std::string_view text);
  // The line request() writes, without the newline (for tests).
  [[nodiscard]] std::string format(const AccessRecord& r) const;

 private:
  void write_line(const std::string& line);
  LogFormat format_;
  LogLevel level_;
  std::FILE* out_;
  std::mutex mu_;
};

}  // namespace kvs
