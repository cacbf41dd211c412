// A guard for JSON parsers: nlohmann::json builds (and destroys) nested values recursively, so a
// text of arrays or objects nested 100,000 deep overflows the stack: a crash on bad input (a
// config file, a trace line, a request body). Every untrusted JSON text is checked here first,
// in one pass without recursion: nesting deeper than kMaxJsonDepth is a clear error.
#pragma once

#include <cstddef>
#include <string_view>

#include "core/status.h"

namespace kvs {

// Far deeper than any config, trace or request kvserve reads (they nest a few levels).
inline constexpr size_t kMaxJsonDepth = 256;

// invalid_argument("<what>: JSON nested deeper than N levels") when `text` opens more than
// max_depth arrays or objects at once (brackets inside strings do not count).
[[nodiscard]] Status check_json_nesting(std::string_view text, std::string_view what,
                                        size_t max_depth = kMaxJsonDepth);

}  // namespace kvs
