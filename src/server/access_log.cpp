#include "server/access_log.h"

#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

namespace kvs {

Result<LogFormat> parse_log_format(std::string_view s) {
  if (s == "text") return LogFormat::kText;
  if (s == "json") return LogFormat::kJson;
  return invalid_argument("--log-format must be text or json, got '" + std::string(s) + "'");
}

Result<LogLevel> parse_log_level(std::string_view s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warning") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  return invalid_argument("--log-level must be debug, info, warning or error, got '" +
                          std::string(s) + "'");
}

namespace {

// UTC, ISO 8601 with milliseconds.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "info";
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

}  // namespace

std::string AccessLog::format(const AccessRecord& r) const {
  if (format_ == LogFormat::kJson) {
    nlohmann::json j = {{"time", timestamp()},
                        {"level", "info"},
                        {"event", "request"},
                        {"request_id", r.request_id},
                        {"tenant", r.tenant},
                        {"route", r.route},
                        {"status", r.status},
                        {"prompt_tokens", r.prompt_tokens},
                        {"cached_tokens", r.cached_tokens},
                        {"output_tokens", r.output_tokens},
                        {"ttft_s", r.ttft_s ? nlohmann::json(*r.ttft_s) : nlohmann::json()},
                        {"total_s", r.total_s},
                        {"outcome", r.outcome}};
    // Replace invalid UTF-8 instead of throwing: labels come from key files.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return timestamp() + " kvserve access: id=" + r.request_id + " tenant=" + r.tenant +
         " route=" + r.route + " status=" + std::to_string(r.status) +
         " prompt_tokens=" + std::to_string(r.prompt_tokens) +
         " cached_tokens=" + std::to_string(r.cached_tokens) +
         " output_tokens=" + std::to_string(r.output_tokens) +
         " ttft_s=" + (r.ttft_s ? seconds(*r.ttft_s) : std::string("-")) +
         " total_s=" + seconds(r.total_s) + " outcome=" + r.outcome;
}

void AccessLog::request(const AccessRecord& r) {
  if (!enabled(LogLevel::kInfo)) return;
  write_line(format(r));
}

void AccessLog::message(LogLevel level, std::string_view text) {
  if (!enabled(level)) return;
  if (format_ == LogFormat::kJson) {
    const nlohmann::json j = {
        {"time", timestamp()}, {"level", level_name(level)}, {"message", std::string(text)}};
    write_line(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    write_line(timestamp() + " kvserve " + level_name(level) + ": " + std::string(text));
  }
}

void AccessLog::write_line(const std::string& line) {
  std::lock_guard lock(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace kvs
