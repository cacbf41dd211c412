#include "tools/cli_yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kvs::cli {
namespace {

// "line L, column C: " for a node or an exception's mark (yaml-cpp counts from 0; -1: unknown).
std::string where(const YAML::Mark& mark, bool column = false) {
  if (mark.is_null()) return "";
  std::string s = "line " + std::to_string(mark.line + 1);
  if (column) s += ", column " + std::to_string(mark.column + 1);
  return s + ": ";
}

const char* kind_name(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Null: return "empty";
    case YAML::NodeType::Undefined: break;
  }
  return "undefined";
}

Result<ConfigEntry> entry_of(const std::string& key, const YAML::Node& value, int line) {
  ConfigEntry e{.key = key, .line = line};
  const std::string at = "line " + std::to_string(line) + ": " + key + ": ";
  switch (value.Type()) {
    case YAML::NodeType::Scalar: e.values.push_back(value.Scalar()); return e;
    case YAML::NodeType::Sequence:
      e.is_list = true;
      for (const YAML::Node& item : value) {
        if (!item.IsScalar())
          return invalid_argument(at + "a list element is " + kind_name(item) +
                                  "; a flag's values are scalars (numbers, words, paths)");
        e.values.push_back(item.Scalar());
      }
      if (e.values.empty()) return invalid_argument(at + "an empty list gives the flag no value");
      return e;
    case YAML::NodeType::Null:
      return invalid_argument(at + "no value (write `" + key + ": VALUE`, or leave the key out)");
    case YAML::NodeType::Map:
      return invalid_argument(at +
                              "a mapping is not a flag value (keys are flag names at the "
                              "top level, e.g. max-model-len: 4096)");
    case YAML::NodeType::Undefined: break;
  }
  return invalid_argument(at + "the value is " + kind_name(value));
}

}  // namespace

Result<std::vector<ConfigEntry>> parse_yaml_config(const std::string& text) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    return invalid_argument(where(e.mark, /*column=*/true) + "malformed YAML: " + e.msg);
  }
  std::vector<ConfigEntry> out;
  if (docs.empty() || (docs.size() == 1 && docs[0].IsNull())) return out;
  if (docs.size() > 1)
    return invalid_argument(where(docs[1].Mark()) +
                            "a second YAML document; the file holds one "
                            "mapping of flag names to values");
  const YAML::Node& root = docs[0];
  if (!root.IsMap())
    return invalid_argument(where(root.Mark()) + "the top level is " + kind_name(root) +
                            "; it must be a mapping of flag names to values (e.g. "
                            "max-model-len: 4096)");
  std::map<std::string, std::pair<int, std::string>> seen;  // key -> its line and spelling
  for (auto it = root.begin(); it != root.end(); ++it) {
    // Copies: the iterator's pair is a temporary that the nodes would outlive.
    const YAML::Node k = it->first;
    const YAML::Node v = it->second;
    const int line = k.Mark().is_null() ? 0 : k.Mark().line + 1;
    if (!k.IsScalar() || k.Scalar().empty())
      return invalid_argument(where(k.Mark()) + "a key is " + kind_name(k) +
                              "; keys are flag names such as max-model-len");
    std::string key = k.Scalar();
    std::replace(key.begin(), key.end(), '_', '-');
    const auto [at, inserted] = seen.emplace(key, std::make_pair(line, k.Scalar()));
    if (!inserted) {
      const auto& [first_line, first] = at->second;
      return invalid_argument("line " + std::to_string(line) + ": " + k.Scalar() +
                              ": given twice (" +
                              (first == k.Scalar() ? "also" : "as " + first + " on") + " line " +
                              std::to_string(first_line) + ")");
    }
    auto entry = entry_of(key, v, line);
    if (!entry.is_ok()) return entry.status();
    out.push_back(std::move(entry).value());
  }
  return out;
}

Result<std::vector<ConfigEntry>> read_yaml_config(const std::string& path) {
  const std::string what = "--config " + path + ": ";
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) return not_found(what + "no such file");
  if (!std::filesystem::is_regular_file(st))
    return invalid_argument(what + "not a regular file (give a YAML file)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(what + "cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(what + "cannot read: " + std::strerror(errno));
  auto entries = parse_yaml_config(ss.str());
  if (!entries.is_ok()) return Status(entries.status().code(), what + entries.status().message());
  return entries;
}

}  // namespace kvs::cli
