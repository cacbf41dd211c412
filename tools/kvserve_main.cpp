// kvserve: the command-line entry point. Subcommands live in tools/cli_*.cpp.
#include <cstdio>
#include <iostream>

#include "tools/cli_commands.h"

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
  kvs::cli::add_generate_command(app);
  kvs::cli::add_perplexity_command(app);
  kvs::cli::add_plan_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvs::cli::CliExit& e) {
    return e.code;
  }
  return 0;
}
