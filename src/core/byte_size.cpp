#include "core/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace kvs {

Result<uint64_t> parse_byte_size(std::string_view text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s.push_back(c);
  if (s.empty()) return invalid_argument("empty byte size");
  size_t pos = 0;
  while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.' ||
                            s[pos] == 'e' || s[pos] == 'E' || s[pos] == '+')) {
    // stop at a unit that starts with e/E? Units never start with e, so 'e' here is an exponent.
    ++pos;
  }
  const std::string number = s.substr(0, pos);
  std::string unit = s.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty())
    return invalid_argument("byte size '" + std::string(text) + "' does not start with a number");
  double value = 0;
  const auto [end, err] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (err == std::errc::result_out_of_range)
    return invalid_argument("byte size '" + std::string(text) + "' is out of range");
  if (err != std::errc() || end != number.data() + number.size())
    return invalid_argument("byte size '" + std::string(text) + "' has a malformed number");
  double mult = 1;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kb")
    mult = 1e3;
  else if (unit == "m" || unit == "mb")
    mult = 1e6;
  else if (unit == "g" || unit == "gb")
    mult = 1e9;
  else if (unit == "t" || unit == "tb")
    mult = 1e12;
  else if (unit == "kib" || unit == "ki")
    mult = 1024.0;
  else if (unit == "mib" || unit == "mi")
    mult = 1024.0 * 1024;
  else if (unit == "gib" || unit == "gi")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "tib" || unit == "ti")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return invalid_argument("byte size '" + std::string(text) +
                            "' has an unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
  const double bytes = std::round(value * mult);
  if (!std::isfinite(bytes) || bytes < 0 || bytes > static_cast<double>(kMaxByteSize))
    return invalid_argument("byte size '" + std::string(text) +
                            "' is out of range (at most 1 EiB)");
  return static_cast<uint64_t>(bytes);
}

static std::string format_scaled(uint64_t bytes, double base, const char* const* units) {
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= base && units[u + 1] != nullptr) {
    v /= base;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(bytes), units[0]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::string format_bytes_binary(uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", nullptr};
  return format_scaled(bytes, 1024.0, units);
}

std::string format_bytes_decimal(uint64_t bytes) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB", nullptr};
  return format_scaled(bytes, 1000.0, units);
}

std::string format_thousands(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    out.push_back(digits[i]);
    const int left = n - 1 - i;
    if (left > 0 && left % 3 == 0) out.push_back(',');
  }
  return out;
}

}  // namespace kvs
