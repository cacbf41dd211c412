// config_json: the reader of model config files (config.json, catalog entries). Python's json
// module writes the non-finite floats it holds as the bare words Infinity, -Infinity and NaN,
// which strict JSON (and nlohmann's parser) rejects; real configs carry them (Nemotron-H's
// "time_step_limit": [0.0, Infinity]). This reader accepts exactly those three words where a
// JSON value can stand, outside strings, and nothing else that strict JSON refuses.
//
// Each such word becomes the JSON string of its spelling ("Infinity", "-Infinity", "NaN"), so a
// field the planner sizes with (a head count, a layer count) that holds one fails its type check
// with a clear error instead of turning into a number; fields the planner never reads
// (time_step_limit) are just carried. The text is also bounded in nesting (core/json_nesting.h).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace kvs {

// The text with every bare Infinity / -Infinity / NaN token outside strings quoted; everything
// else (strings with those words in them, malformed text) is left as it is for the parser.
[[nodiscard]] std::string quote_nonfinite_json_numbers(std::string_view text);

// Parses a config file's text. `origin` names it in errors: "<origin>: not valid JSON (...)".
[[nodiscard]] Result<nlohmann::json> parse_config_json(std::string_view text,
                                                       const std::string& origin);

}  // namespace kvs
