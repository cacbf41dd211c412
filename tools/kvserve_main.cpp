// kvserve: the command-line entry point. Subcommands live in tools/cli_*.cpp.
#include <cstdio>
#include <iostream>
#include <string>

#include "tools/cli_commands.h"
#include "tools/cli_version.h"

namespace kvs::cli {

void fail(const std::string& message, int code) {
  std::fprintf(stderr, "kvserve: %s\n", message.c_str());
  throw CliExit{code};
}

}  // namespace kvs::cli

int main(int argc, char** argv) {
  CLI::App app{
      "kvserve: an LLM inference engine built around a paged KV cache.\n"
      "Run `kvserve SUBCOMMAND --help` for the flags of each subcommand."};
  app.require_subcommand(1);
  app.set_version_flag("--version", kvs::cli::version_line(), "Print the version and the commit");
  kvs::cli::add_generate_command(app);
  kvs::cli::add_keygen_command(app);
  kvs::cli::add_perplexity_command(app);
  kvs::cli::add_plan_command(app);
  kvs::cli::add_serve_command(app);
  kvs::cli::add_simulate_command(app);
  kvs::cli::add_version_command(app);
  std::string names;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    if (argc > 1 && sub->get_name() == argv[1]) known = true;
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr,
                 "kvserve: unknown subcommand '%s' (expected one of %s; see kvserve --help)\n",
                 argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvs::cli::CliExit& e) {
    return e.code;
  }
  return 0;
}
