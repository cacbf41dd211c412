#include "sim/trace_parsers.h"

#include "core/json_nesting.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvs {

namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Calls fn(line_number, line) for every line (without its '\n' / "\r\n").
template <typename Fn>
Status for_each_line(std::string_view text, Fn fn) {
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxTraceLineBytes)
      return invalid_argument("line " + std::to_string(line_no + 1) + " is longer than " +
                              std::to_string(kMaxTraceLineBytes) +
                              " bytes: not a request of a trace");
    KVS_RETURN_IF_ERROR(fn(++line_no, line));
  }
  return Status::ok();
}

// A whole, non-negative count that fits uint32.
Result<uint32_t> json_count(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) return invalid_argument(where + "'" + key + "' is missing");
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > UINT32_MAX)
    return invalid_argument(where + "'" + key + "' must be a whole number in [0, 4294967295]");
  return static_cast<uint32_t>(it->get<int64_t>());
}

void sort_and_note(Trace& t, uint64_t zero_outputs) {
  std::stable_sort(
      t.requests.begin(), t.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  if (zero_outputs > 0)
    t.notes.push_back(std::to_string(zero_outputs) +
                      " requests with 0 output tokens were given 1 (the engine generates at "
                      "least one token)");
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// Seconds: a plain number, or "YYYY-MM-DD HH:MM:SS[.fraction]" (also with 'T').
std::optional<double> parse_timestamp(std::string_view s) {
  s = trim(s);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && end == s.data() + s.size() && std::isfinite(v)) return v;
  // Date-time.
  int y = 0, mo = 0, d = 0, h = 0, mi = 0;
  double sec = 0;
  auto num = [&](size_t pos, size_t len, int* out) {
    if (pos + len > s.size()) return false;
    const auto r = std::from_chars(s.data() + pos, s.data() + pos + len, *out);
    return r.ec == std::errc() && r.ptr == s.data() + pos + len;
  };
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':')
    return std::nullopt;
  if (!num(0, 4, &y) || !num(5, 2, &mo) || !num(8, 2, &d) || !num(11, 2, &h) || !num(14, 2, &mi))
    return std::nullopt;
  std::string_view rest = s.substr(17);
  if (!rest.empty() && (rest.back() == 'Z')) rest.remove_suffix(1);
  const auto r = std::from_chars(rest.data(), rest.data() + rest.size(), sec);
  if (r.ec != std::errc() || r.ptr != rest.data() + rest.size()) return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec >= 61) return std::nullopt;
  return static_cast<double>(
             days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d))) *
             86400.0 +
         h * 3600.0 + mi * 60.0 + sec;
}

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  bool quoted = false;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i < line.size() && line[i] == '"') quoted = !quoted;
    if (i == line.size() || (line[i] == ',' && !quoted)) {
      out.push_back(trim(line.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

}  // namespace

Result<TraceFormat> parse_trace_format(const std::string& name) {
  if (name.empty() || name == "auto") return TraceFormat::kAuto;
  if (name == "mooncake" || name == "jsonl") return TraceFormat::kMooncakeJsonl;
  if (name == "csv" || name == "azure") return TraceFormat::kCsv;
  return invalid_argument("--trace-format must be auto, mooncake or csv, got '" + name + "'");
}

Result<Trace> parse_mooncake_jsonl(std::string_view text, const std::string& origin,
                                   uint32_t block_tokens) {
  Trace t;
  t.source = origin;
  t.block_tokens = block_tokens;
  if (block_tokens == 0) return invalid_argument("the trace block size must be at least 1");
  uint64_t zero_outputs = 0;
  const Status st = for_each_line(text, [&](size_t line_no, std::string_view line) -> Status {
    if (trim(line).empty()) return Status::ok();
    const std::string where = origin + " line " + std::to_string(line_no) + ": ";
    KVS_RETURN_IF_ERROR(check_json_nesting(line, where + "a request"));
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(where + "not a JSON object");
    TraceRequest r;
    const auto ts = j.find("timestamp");
    if (ts == j.end() || !ts->is_number() || !std::isfinite(ts->get<double>()) ||
        ts->get<double>() < 0)
      return invalid_argument(where + "'timestamp' (milliseconds) must be a number >= 0");
    r.arrival_s = ts->get<double>() / 1000.0;
    KVS_ASSIGN_OR_RETURN(r.input_tokens, json_count(j, "input_length", where));
    KVS_ASSIGN_OR_RETURN(r.output_tokens, json_count(j, "output_length", where));
    if (r.input_tokens == 0) return invalid_argument(where + "'input_length' must be at least 1");
    if (r.output_tokens == 0) {
      r.output_tokens = 1;
      ++zero_outputs;
    }
    if (const auto ids = j.find("hash_ids"); ids != j.end()) {
      if (!ids->is_array()) return invalid_argument(where + "'hash_ids' must be an array");
      r.hash_ids.reserve(ids->size());
      for (const json& id : *ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0)
          return invalid_argument(where + "'hash_ids' must hold whole numbers >= 0");
        r.hash_ids.push_back(static_cast<uint64_t>(id.get<int64_t>()));
      }
      const uint64_t max_ids = (uint64_t{r.input_tokens} + block_tokens - 1) / block_tokens;
      if (r.hash_ids.size() > max_ids)
        return invalid_argument(where + std::to_string(r.hash_ids.size()) + " hash_ids for " +
                                std::to_string(r.input_tokens) + " input tokens: at most " +
                                std::to_string(max_ids) + " blocks of " +
                                std::to_string(block_tokens) + " tokens");
    }
    t.requests.push_back(std::move(r));
    return Status::ok();
  });
  KVS_RETURN_IF_ERROR(st);
  if (t.requests.empty()) return invalid_argument(origin + ": the trace has no requests");
  sort_and_note(t, zero_outputs);
  // Timestamps are relative to the first request already; keep them as given.
  return t;
}

Result<Trace> parse_csv_trace(std::string_view text, const std::string& origin) {
  Trace t;
  t.source = origin;
  int col_time = -1, col_in = -1, col_out = -1;
  size_t columns = 0;
  uint64_t zero_outputs = 0;
  std::optional<double> first;
  const Status st = for_each_line(text, [&](size_t line_no, std::string_view line) -> Status {
    if (trim(line).empty()) return Status::ok();
    const std::string where = origin + " line " + std::to_string(line_no) + ": ";
    const std::vector<std::string_view> f = split_csv(line);
    if (columns == 0) {
      for (size_t i = 0; i < f.size(); ++i) {
        std::string name = lower(f[i]);
        if (name.size() >= 2 && name.front() == '"' && name.back() == '"')
          name = name.substr(1, name.size() - 2);
        const int c = static_cast<int>(i);
        if (name == "timestamp" || name == "time") col_time = c;
        if (name == "prompt_tokens" || name == "contexttokens" || name == "input_length" ||
            name == "input_tokens")
          col_in = c;
        if (name == "output_tokens" || name == "generatedtokens" || name == "output_length")
          col_out = c;
      }
      if (col_time < 0 || col_in < 0 || col_out < 0)
        return invalid_argument(where +
                                "the header must name timestamp, prompt_tokens (or "
                                "ContextTokens) and output_tokens (or GeneratedTokens)");
      columns = f.size();
      return Status::ok();
    }
    if (f.size() < columns)
      return invalid_argument(where + "expected " + std::to_string(columns) + " columns, got " +
                              std::to_string(f.size()));
    const std::optional<double> ts = parse_timestamp(f[col_time]);
    if (!ts)
      return invalid_argument(where + "timestamp '" + std::string(f[col_time]) +
                              "' is neither seconds nor 'YYYY-MM-DD HH:MM:SS[.f]'");
    auto count = [&](int col, const char* what) -> Result<uint32_t> {
      uint64_t v = 0;
      const std::string_view s = f[col];
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc() || end != s.data() + s.size() || v > UINT32_MAX)
        return invalid_argument(where + what + " '" + std::string(s) +
                                "' is not a whole number >= 0");
      return static_cast<uint32_t>(v);
    };
    TraceRequest r;
    if (!first) first = *ts;
    r.arrival_s = *ts - *first;
    KVS_ASSIGN_OR_RETURN(r.input_tokens, count(col_in, "prompt tokens"));
    KVS_ASSIGN_OR_RETURN(r.output_tokens, count(col_out, "output tokens"));
    if (r.input_tokens == 0) return invalid_argument(where + "a prompt needs at least 1 token");
    if (r.output_tokens == 0) {
      r.output_tokens = 1;
      ++zero_outputs;
    }
    t.requests.push_back(std::move(r));
    return Status::ok();
  });
  KVS_RETURN_IF_ERROR(st);
  if (t.requests.empty()) return invalid_argument(origin + ": the trace has no requests");
  sort_and_note(t, zero_outputs);
  // Rows before the first one in time: arrivals relative to the earliest.
  const double t0 = t.requests.front().arrival_s;
  if (t0 < 0)
    for (TraceRequest& r : t.requests) r.arrival_s -= t0;
  return t;
}

Result<Trace> load_trace(const std::string& path, TraceFormat format, uint32_t block_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open trace " + path);
  // The size first: a trace is read whole, so its size is the memory it costs.
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return invalid_argument("trace " + path + ": cannot tell its size");
  if (static_cast<uint64_t>(size) > kMaxTraceBytes)
    return invalid_argument("trace " + path + " is " + std::to_string(size) +
                            " bytes, more than the " + std::to_string(kMaxTraceBytes) +
                            " a trace may have (split it)");
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) return invalid_argument("trace " + path + ": cannot read it");
  if (format == TraceFormat::kAuto) {
    const bool csv_name = path.size() >= 4 && lower(path.substr(path.size() - 4)) == ".csv";
    const size_t first = text.find_first_not_of(" \t\r\n");
    format = !csv_name && first != std::string::npos && text[first] == '{'
                 ? TraceFormat::kMooncakeJsonl
                 : TraceFormat::kCsv;
  }
  if (format == TraceFormat::kMooncakeJsonl) return parse_mooncake_jsonl(text, path, block_tokens);
  return parse_csv_trace(text, path);
}

std::string trace_to_mooncake_jsonl(const Trace& t) {
  std::string out;
  for (const TraceRequest& r : t.requests) {
    nlohmann::ordered_json j;
    j["timestamp"] = static_cast<int64_t>(std::llround(r.arrival_s * 1000.0));
    j["input_length"] = r.input_tokens;
    j["output_length"] = r.output_tokens;
    j["hash_ids"] = r.hash_ids;
    out += j.dump();
    out += '\n';
  }
  return out;
}

}  // namespace kvs
