#include "tools/cli_config_file.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/edit_distance.h"

namespace kvs::cli {
namespace {

// YAML 1.1's booleans, as PyYAML (and so vLLM) reads them.
std::optional<bool> parse_bool(const std::string& s) {
  static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes",
                                            "YES",  "on",   "On",   "ON"};
  static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No",
                                           "NO",    "off",   "Off",   "OFF"};
  if (yes.count(s)) return true;
  if (no.count(s)) return false;
  return std::nullopt;
}

// The keys `cmd` takes: its configurable options' long names, without dashes.
std::vector<std::string> config_keys(const CLI::App& cmd) {
  std::vector<std::string> keys;
  for (const CLI::Option* op : cmd.get_options())
    if (op->get_configurable())
      for (const std::string& name : op->get_lnames()) keys.push_back(name);
  return keys;
}

Status unknown_key(const CLI::App& cmd, const ConfigEntry& e, const std::string& at) {
  if (!e.key.empty() && e.key[0] == '-') {
    const size_t first = e.key.find_first_not_of('-');
    const std::string bare = first == std::string::npos ? "" : e.key.substr(first);
    return invalid_argument(at + "a key is the flag's name without its dashes (" + bare + ")");
  }
  std::string best;
  size_t best_d = 3;  // suggest at most two edits away
  for (const std::string& k : config_keys(cmd)) {
    const size_t d = edit_distance(e.key, k);
    if (d < best_d) best_d = d, best = k;
  }
  const std::string hint = best.empty() ? "keys are long flag names, e.g. max-model-len; see "
                                          "kvserve " +
                                              cmd.get_name() + " --help"
                                        : "did you mean " + best + "?";
  return invalid_argument("line " + std::to_string(e.line) + ": unknown key '" + e.key +
                          "': kvserve " + cmd.get_name() + " has no flag --" + e.key + " (" + hint +
                          ")");
}

// "INT" -> "an integer": what a refused value should have been.
std::string expected_type(const CLI::Option& op) {
  std::string t = op.get_type_name();
  t = t.substr(0, t.find(':'));
  if (t == "INT") return "an integer";
  if (t == "UINT") return "a non-negative integer";
  if (t == "FLOAT") return "a number";
  if (t.empty() || t == "TEXT") return "a value it accepts";
  return t;
}

// Adds `values` to `op` and runs its callback (conversion, checks, the variable's assignment).
Status give(CLI::Option& op, const std::vector<std::string>& values, const std::string& at) {
  op.add_result(values);
  try {
    op.run_callback();
  } catch (const CLI::ConversionError&) {
    std::string shown;
    for (const std::string& v : values) shown += (shown.empty() ? "'" : ", '") + v + "'";
    return invalid_argument(at + shown + " is not " + expected_type(op) + " (the value of " +
                            op.get_name() + ")");
  } catch (const CLI::Error& e) {
    return invalid_argument(at + e.what());
  }
  return Status::ok();
}

class Applier {
 public:
  explicit Applier(CLI::App& cmd) : cmd_(cmd) {
    // What the command line gave, before the entries add to the counts.
    for (const CLI::Option* op : cmd.get_options())
      if (op->count() > 0) given_.insert(op);
  }

  Status apply(const ConfigEntry& e) {
    const std::string at = "line " + std::to_string(e.line) + ": " + e.key + ": ";
    if (e.key == "config")
      return invalid_argument(at + "a config file cannot name another (give one --config)");
    CLI::Option* op = cmd_.get_option_no_throw("--" + e.key);
    if (op == nullptr || !op->get_configurable()) return unknown_key(cmd_, e, at);
    if (op->get_expected_max() == 0) return apply_flag(e, op, at);

    if (e.values.size() > 1 && op->get_items_expected_max() <= 1)
      return invalid_argument(at + "takes one value, not a list of " +
                              std::to_string(e.values.size()));
    KVS_RETURN_IF_ERROR(claim(op, e, at));
    // MODEL is the positional spelling of --model (cli_common_flags.h): either one wins.
    const CLI::Option* positional = cmd_.get_option_no_throw("MODEL");
    if (op->check_lname("model") && positional != nullptr && given_.count(positional)) return {};
    if (given_.count(op)) return {};
    return give(*op, e.values, at);
  }

 private:
  Status apply_flag(const ConfigEntry& e, CLI::Option* op, const std::string& at) {
    const std::optional<bool> value =
        !e.is_list && e.values.size() == 1 ? parse_bool(e.values[0]) : std::nullopt;
    if (!value) {
      const std::string got =
          e.is_list || e.values.size() != 1 ? "a list" : "'" + e.values[0] + "'";
      return invalid_argument(at + "takes true or false (--" + e.key + " is a switch), not " + got);
    }
    // An on/off pair of add_on_off_flags: --X sets on, --no-X sets off; `X: false` is --no-X.
    CLI::Option* on = op;
    CLI::Option* off = cmd_.get_option_no_throw("--no-" + e.key);
    bool set_on = *value;
    if (off == nullptr && e.key.rfind("no-", 0) == 0) {
      on = cmd_.get_option_no_throw("--" + e.key.substr(3));
      off = op;
      set_on = !*value;
    }
    if (on == nullptr || off == nullptr || on->get_expected_max() != 0 ||
        off->get_expected_max() != 0) {
      KVS_RETURN_IF_ERROR(claim(op, e, at));
      if (given_.count(op)) return {};
      return give(*op, {*value ? "true" : "false"}, at);
    }
    KVS_RETURN_IF_ERROR(claim(on, e, at));
    if (given_.count(on) || given_.count(off)) return {};
    return give(set_on ? *on : *off, {"true"}, at);
  }

  // One key per flag: two keys that name it (kv-dtype and kv-cache-dtype, enable-X and
  // no-enable-X) would leave which one counts to the order of the file.
  Status claim(const CLI::Option* op, const ConfigEntry& e, const std::string& at) {
    const auto [it, inserted] = claimed_.emplace(op, &e);
    if (inserted) return {};
    return invalid_argument(at + "the same flag as " + it->second->key + " on line " +
                            std::to_string(it->second->line) + "; give one");
  }

  CLI::App& cmd_;
  std::set<const CLI::Option*> given_;
  std::map<const CLI::Option*, const ConfigEntry*> claimed_;
};

}  // namespace

Status apply_config_entries(CLI::App& cmd, const std::vector<ConfigEntry>& entries) {
  Applier applier(cmd);
  for (const ConfigEntry& e : entries) KVS_RETURN_IF_ERROR(applier.apply(e));
  return Status::ok();
}

Status apply_config_file(CLI::App& cmd, const std::string& path) {
  auto entries = read_yaml_config(path);
  if (!entries.is_ok()) return entries.status();
  const Status applied = apply_config_entries(cmd, *entries);
  if (applied.is_ok()) return applied;
  return Status(applied.code(), "--config " + path + ": " + applied.message());
}

}  // namespace kvs::cli
