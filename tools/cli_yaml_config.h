// The YAML of `--config FILE` (serve, generate, plan, simulate), read as vLLM reads its own:
// one mapping from flag names to values.
//
//   model: SmolLM2-135M-Instruct.Q4_1.gguf
//   max_model_len: 4096          # underscores read as dashes: max-model-len
//   enable-prefix-caching: false
//   api-key: [key-a, key-b]      # a flag that takes several values: a sequence
//
// This file only reads the YAML: keys, their values as text and their lines. Which keys exist
// and what their values mean is the subcommand's (cli_config_file.h applies the entries to it).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kvs::cli {

struct ConfigEntry {
  std::string key;                  // as written, underscores turned to dashes
  std::vector<std::string> values;  // a scalar's text, or a sequence's scalars in order
  bool is_list = false;             // written as a sequence (one element or several)
  int line = 0;                     // 1-based line of the key
};

// Parses YAML text. Errors name the line ("line 3, column 7: ..."): malformed YAML, a top level
// that is not a mapping, a key that is not a plain name, a key given twice (also as max_model_len
// and max-model-len), a value that is empty, a mapping or a sequence of anything but scalars.
// An empty document has no entries.
Result<std::vector<ConfigEntry>> parse_yaml_config(const std::string& text);

// Reads and parses the file at `path`; every error begins with "--config PATH".
Result<std::vector<ConfigEntry>> read_yaml_config(const std::string& path);

}  // namespace kvs::cli
