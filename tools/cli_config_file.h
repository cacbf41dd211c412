// Applies the entries of a `--config FILE` (cli_yaml_config.h) to a subcommand's flags, as vLLM
// does: a key is a long flag name without its dashes, and a flag given on the command line wins
// over the file.
//
// The Debian CLI11 (2.1.2) reads config files for the top-level App only (App::set_config on a
// subcommand adds the option but never reads the file), and its own mapping would get two of our
// flags wrong (an on/off pair, and MODEL, the positional spelling of --model), so the entries are
// applied here, through the options' public interface, after the command line is parsed.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "tools/cli_yaml_config.h"

namespace kvs::cli {

// Gives each entry to the option of `cmd` it names, unless the command line gave that option:
//   - a key is a long name without dashes (max-model-len, or max_model_len), never a short one;
//   - a boolean flag takes true/false (also yes/no, on/off); an on/off pair made by
//     add_on_off_flags (--enable-X / --no-enable-X) takes `enable-X: false` for --no-enable-X,
//     and either flag on the command line overrides the key;
//   - `model` is overridden by --model and by the positional MODEL alike;
//   - a flag that takes several values (--api-key, --kv-remote, --sweep) takes a list.
// Errors ("line N: KEY: ...", first one only): an unknown key (with a close spelling if there is
// one), `config` itself, two keys naming one flag, a list for a one-value flag, a value the flag's
// type or check refuses. Call it once the command line is parsed and the options' callbacks have
// run: the entries' callbacks run here, in the file's order.
Status apply_config_entries(CLI::App& cmd, const std::vector<ConfigEntry>& entries);

// read_yaml_config(path), then apply_config_entries; every error begins with "--config PATH: ".
Status apply_config_file(CLI::App& cmd, const std::string& path);

}  // namespace kvs::cli
