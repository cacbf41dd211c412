// `kvserve version` (and the text of `kvserve --version`): the version and the commit.
#include "tools/cli_version.h"

#include <iostream>

#include "tools/cli_commands.h"

namespace kvs::cli {

std::string version_line() {
  return std::string("kvserve ") + kVersion + " (commit " + kGitCommit + ")";
}

void add_version_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version and the git commit built from");
  cmd->callback([] { std::cout << version_line() << "\n"; });
}

}  // namespace kvs::cli
