#include "core/json_nesting.h"

#include <string>

namespace kvs {

Status check_json_nesting(std::string_view text, std::string_view what, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > max_depth)
          return invalid_argument(std::string(what) + ": JSON nested deeper than " +
                                  std::to_string(max_depth) + " levels");
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return Status::ok();
}

}  // namespace kvs
