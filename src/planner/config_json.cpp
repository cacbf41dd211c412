#include "planner/config_json.h"

#include <nlohmann/json.hpp>

#include "core/json_nesting.h"

namespace kvs {
namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '+' || c == '-';
}

}  // namespace

std::string quote_nonfinite_json_numbers(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      // A string: copied verbatim up to its closing quote (escapes skipped), so the words inside
      // it are never touched. An unterminated string is left for the parser to reject.
      const size_t start = i++;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      i = std::min(i + 1, text.size());
      out.append(text.substr(start, i - start));
      continue;
    }
    if (!is_word_char(c)) {
      out.push_back(c);
      ++i;
      continue;
    }
    // A bare token (a number, true/false/null, or something the parser will reject): whole.
    size_t end = i;
    while (end < text.size() && is_word_char(text[end])) ++end;
    const std::string_view token = text.substr(i, end - i);
    if (token == "Infinity" || token == "-Infinity" || token == "NaN") {
      out.push_back('"');
      out.append(token);
      out.push_back('"');
    } else {
      out.append(token);
    }
    i = end;
  }
  return out;
}

Result<nlohmann::json> parse_config_json(std::string_view text, const std::string& origin) {
  KVS_RETURN_IF_ERROR(check_json_nesting(text, origin));
  const std::string lenient = quote_nonfinite_json_numbers(text);
  try {
    return nlohmann::json::parse(lenient);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts in the rewritten text, which is longer by two bytes per quoted word; the
    // parser's own message (what it expected) is what helps, so it is passed on as it is.
    std::string what = e.what();
    if (const size_t colon = what.find("parse error"); colon != std::string::npos)
      what = what.substr(colon);
    return invalid_argument(origin + ": not valid JSON (" + what + ")");
  }
}

}  // namespace kvs
