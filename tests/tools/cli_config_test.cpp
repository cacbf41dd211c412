// --config FILE: the YAML reader (tools/cli_yaml_config.h) and the entries applied to a
// subcommand's flags (tools/cli_config_file.h), on a small CLI11 App built like kvserve's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli_config_file.h"
#include "tools/cli_yaml_config.h"

namespace kvs::cli {
namespace {

std::vector<ConfigEntry> parse_ok(const std::string& yaml) {
  auto r = parse_yaml_config(yaml);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : std::vector<ConfigEntry>{};
}

std::string parse_error(const std::string& yaml) {
  auto r = parse_yaml_config(yaml);
  EXPECT_FALSE(r.is_ok()) << yaml;
  return r.is_ok() ? "" : r.status().message();
}

TEST(YamlConfig, ReadsScalarsListsAndLines) {
  const auto e = parse_ok(
      "# production\n"
      "max_model_len: 4096\n"
      "host: \"0.0.0.0\"\n"
      "enable-prefix-caching: false\n"
      "api-key: [a, b]\n"
      "kv-remote:\n"
      "  - redis://h1:6379\n"
      "  - redis://h2:6379\n");
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].key, "max-model-len");
  EXPECT_EQ(e[0].values, std::vector<std::string>{"4096"});
  EXPECT_FALSE(e[0].is_list);
  EXPECT_EQ(e[0].line, 2);
  EXPECT_EQ(e[1].values, std::vector<std::string>{"0.0.0.0"});
  EXPECT_EQ(e[2].values, std::vector<std::string>{"false"});
  EXPECT_EQ(e[3].values, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(e[3].is_list);
  EXPECT_EQ(e[4].values, (std::vector<std::string>{"redis://h1:6379", "redis://h2:6379"}));
  EXPECT_EQ(e[4].line, 6);
}

TEST(YamlConfig, EmptyOrCommentOnlyHasNoEntries) {
  EXPECT_TRUE(parse_ok("").empty());
  EXPECT_TRUE(parse_ok("# nothing yet\n").empty());
}

TEST(YamlConfig, ErrorsNameTheLine) {
  EXPECT_EQ(parse_error("port: 8000\nhost: a: b\nblock-size: 16\n"),
            "line 2, column 8: malformed YAML: illegal map value");
  EXPECT_NE(parse_error("port: 8000\nhost: [a\n").find("line 3"), std::string::npos);
  EXPECT_NE(parse_error("- port\n- host\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(parse_error("just words\n").find("must be a mapping"), std::string::npos);
  EXPECT_NE(parse_error("a: 1\n---\nb: 2\n").find("second YAML document"), std::string::npos);
  const std::string twice = parse_error("port: 1\nhost: h\nport: 2\n");
  EXPECT_NE(twice.find("line 3: port: given twice (also line 1)"), std::string::npos) << twice;
  const std::string spelled = parse_error("max-model-len: 1\nmax_model_len: 2\n");
  EXPECT_NE(spelled.find("as max-model-len on line 1"), std::string::npos) << spelled;
  EXPECT_NE(parse_error("port:\n").find("line 1: port: no value"), std::string::npos);
  EXPECT_NE(parse_error("api-key: []\n").find("empty list"), std::string::npos);
  EXPECT_NE(parse_error("server:\n  port: 1\n").find("a mapping is not a flag value"),
            std::string::npos);
  EXPECT_NE(parse_error("api-key: [[a]]\n").find("a list element is a list"), std::string::npos);
  EXPECT_NE(parse_error("[a]: 1\n").find("a key is a list"), std::string::npos);
}

TEST(YamlConfig, MissingFileAndDirectoryAreClearErrors) {
  auto missing = read_yaml_config("/nonexistent/kvs.yaml");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().message(), "--config /nonexistent/kvs.yaml: no such file");
  auto dir = read_yaml_config("/tmp");
  ASSERT_FALSE(dir.is_ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
}

// A subcommand with the kinds of flags kvserve's have; parse() applies the config as
// add_config_flag does: after the command line, in the parse-complete callback.
struct Toy {
  CLI::App app{"toy"};
  CLI::App* cmd = app.add_subcommand("serve", "toy serve");
  std::string model;
  int port = 8000;
  double timeout = 30;
  bool json = false;
  bool caching = true;
  std::vector<std::string> keys;
  std::string dtype = "auto";
  std::optional<uint64_t> seed;
  std::vector<ConfigEntry> entries;
  Status applied;

  Toy() {
    cmd->add_option("-m,--model", model);
    cmd->add_option_function<std::string>("MODEL", [this](const std::string& m) { model = m; });
    cmd->add_option("--port", port);
    cmd->add_option("--shutdown-timeout", timeout)->check(CLI::Range(0.0, 100.0));
    cmd->add_flag("--json", json);
    cmd->add_flag_callback("--enable-prefix-caching", [this] { caching = true; })
        ->trigger_on_parse();
    cmd->add_flag_callback("--no-enable-prefix-caching", [this] { caching = false; })
        ->trigger_on_parse();
    cmd->add_option("--api-key", keys);
    cmd->add_option("--kv-dtype,--kv-cache-dtype", dtype);
    cmd->add_option("--seed", seed);
    cmd->parse_complete_callback([this] { applied = apply_config_entries(*cmd, entries); });
  }
  // Parses "serve ARGS..." with the YAML as the config file; returns the apply status.
  Status parse(const std::string& yaml, std::vector<std::string> args = {}) {
    entries = parse_ok(yaml);
    args.insert(args.begin(), "serve");
    std::reverse(args.begin(), args.end());
    app.parse(args);
    return applied;
  }
};

TEST(ConfigFile, FillsWhatTheCommandLineLeftOut) {
  Toy t;
  ASSERT_TRUE(t.parse("model: a.gguf\nport: 9000\nshutdown_timeout: 5\njson: true\n"
                      "api-key: [k1, k2]\nkv-cache-dtype: fp8\nseed: 7\n")
                  .is_ok());
  EXPECT_EQ(t.model, "a.gguf");
  EXPECT_EQ(t.port, 9000);
  EXPECT_EQ(t.timeout, 5);
  EXPECT_TRUE(t.json);
  EXPECT_EQ(t.keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_EQ(t.dtype, "fp8");
  EXPECT_EQ(t.seed, 7u);
}

TEST(ConfigFile, TheCommandLineWins) {
  Toy t;
  ASSERT_TRUE(t.parse("model: file.gguf\nport: 9000\napi-key: [k1, k2]\nkv-dtype: fp8\n",
                      {"--port", "9100", "--api-key", "k3", "--kv-cache-dtype", "int8"})
                  .is_ok());
  EXPECT_EQ(t.model, "file.gguf");
  EXPECT_EQ(t.port, 9100);
  EXPECT_EQ(t.keys, std::vector<std::string>{"k3"});
  EXPECT_EQ(t.dtype, "int8");
  // The model by -m or by the positional MODEL.
  Toy by_flag, by_positional;
  ASSERT_TRUE(by_flag.parse("model: file.gguf\n", {"-m", "cli.gguf"}).is_ok());
  EXPECT_EQ(by_flag.model, "cli.gguf");
  ASSERT_TRUE(by_positional.parse("model: file.gguf\n", {"cli.gguf"}).is_ok());
  EXPECT_EQ(by_positional.model, "cli.gguf");
}

TEST(ConfigFile, OnOffPairsTakeTrueAndFalse) {
  Toy off, on, no_true, yaml11;
  ASSERT_TRUE(off.parse("enable-prefix-caching: false\n").is_ok());
  EXPECT_FALSE(off.caching);
  ASSERT_TRUE(on.parse("enable_prefix_caching: true\n").is_ok());
  EXPECT_TRUE(on.caching);
  ASSERT_TRUE(no_true.parse("no-enable-prefix-caching: true\n").is_ok());
  EXPECT_FALSE(no_true.caching);
  ASSERT_TRUE(yaml11.parse("enable-prefix-caching: off\njson: yes\n").is_ok());
  EXPECT_FALSE(yaml11.caching);
  EXPECT_TRUE(yaml11.json);
  // Either flag of the pair on the command line overrides the key.
  Toy cli_on, cli_off;
  ASSERT_TRUE(cli_on.parse("enable-prefix-caching: false\n", {"--enable-prefix-caching"}).is_ok());
  EXPECT_TRUE(cli_on.caching);
  ASSERT_TRUE(
      cli_off.parse("enable-prefix-caching: true\n", {"--no-enable-prefix-caching"}).is_ok());
  EXPECT_FALSE(cli_off.caching);
  Toy plain_false;
  ASSERT_TRUE(plain_false.parse("json: false\n").is_ok());
  EXPECT_FALSE(plain_false.json);
}

std::string apply_error(const std::string& yaml) {
  Toy t;
  const Status s = t.parse(yaml);
  EXPECT_FALSE(s.is_ok()) << yaml;
  return s.message();
}

TEST(ConfigFile, BadKeysAndValuesAreClearErrors) {
  EXPECT_EQ(apply_error("port: 1\nmax-modle-len: 4\n"),
            "line 2: unknown key 'max-modle-len': kvserve serve has no flag "
            "--max-modle-len (keys are long flag names, e.g. max-model-len; see kvserve serve "
            "--help)");
  EXPECT_NE(apply_error("prot: 1\n").find("did you mean port?"), std::string::npos);
  EXPECT_NE(apply_error("m: a.gguf\n").find("unknown key 'm'"), std::string::npos);
  EXPECT_NE(apply_error("help: true\n").find("unknown key 'help'"), std::string::npos);
  EXPECT_NE(apply_error("--port: 1\n").find("without its dashes (port)"), std::string::npos);
  EXPECT_EQ(apply_error("port: abc\n"),
            "line 1: port: 'abc' is not an integer (the value of --port)");
  EXPECT_NE(apply_error("shutdown-timeout: 1000\n").find("not in range"), std::string::npos);
  EXPECT_NE(apply_error("port: [1, 2]\n").find("takes one value, not a list of 2"),
            std::string::npos);
  EXPECT_NE(apply_error("json: sometimes\n").find("takes true or false"), std::string::npos);
  EXPECT_NE(apply_error("enable-prefix-caching: [true]\n").find("takes true or false"),
            std::string::npos);
  EXPECT_NE(apply_error("kv-dtype: fp8\nkv-cache-dtype: int8\n")
                .find("line 2: kv-cache-dtype: the same flag as kv-dtype on line 1"),
            std::string::npos);
  EXPECT_NE(apply_error("enable-prefix-caching: true\nno-enable-prefix-caching: true\n")
                .find("the same flag as enable-prefix-caching"),
            std::string::npos);
  EXPECT_NE(apply_error("config: other.yaml\n").find("cannot name another"), std::string::npos);
}

TEST(ConfigFile, ApplyConfigFileNamesTheFile) {
  char path[] = "/tmp/kvs_config_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "port: 9000\nbogus: 1\n";
  Toy t;
  t.cmd->parse_complete_callback([&t, &path] { t.applied = apply_config_file(*t.cmd, path); });
  t.app.parse(std::vector<std::string>{"serve"});
  std::remove(path);
  EXPECT_EQ(t.applied.message().rfind(
                std::string("--config ") + path + ": line 2: unknown key 'bogus'", 0),
            0u)
      << t.applied.message();
}

}  // namespace
}  // namespace kvs::cli
