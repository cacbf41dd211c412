// The kvserve subcommands. Each tools/cli_<name>.cpp adds one CLI11 subcommand with its flags
// and callback. A callback reports bad input with one clear line on stderr and throws
// CliExit{code} (non-zero) instead of exiting, so main can clean up.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>

#include "core/status.h"

namespace kvs::cli {

struct CliExit {
  int code;
};

// Prints "kvserve: <message>" to stderr and throws CliExit{code}.
[[noreturn]] void fail(const std::string& message, int code = 1);

// The value of r, or fail(what + its error).
template <typename T>
T or_fail(Result<T> r, const std::string& what) {
  if (!r.is_ok()) fail(what + r.status().message());
  return std::move(r).value();
}

void add_generate_command(CLI::App& app);
void add_keygen_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_version_command(CLI::App& app);

}  // namespace kvs::cli
