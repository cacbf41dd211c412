#include "planner/catalog.h"

#include <sstream>

#include "core/json_nesting.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/gguf_file.h"
#include "model/model_paths.h"

namespace kvs {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string exe_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return fs::path(buf).parent_path().string();
}

bool is_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

}  // namespace

std::vector<std::string> data_dir_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("KVSERVE_DATA_DIR"); env != nullptr && *env != '\0')
    out.emplace_back(env);
  if (const std::string exe = exe_dir(); !exe.empty()) {
    out.push_back((fs::path(exe) / ".." / ".." / "data").lexically_normal().string());
    out.push_back(
        (fs::path(exe) / ".." / "share" / "kvserve" / "data").lexically_normal().string());
  }
#ifdef KVSERVE_SOURCE_DATA_DIR
  out.emplace_back(KVSERVE_SOURCE_DATA_DIR);
#endif
  return out;
}

Result<std::string> find_data_dir() {
  std::string looked;
  for (const std::string& dir : data_dir_candidates()) {
    std::error_code ec;
    if (fs::is_directory(fs::path(dir) / "models", ec)) return dir;
    looked += (looked.empty() ? "" : ", ") + dir;
  }
  return not_found("model catalog not found (looked in: " + looked +
                   "); set KVSERVE_DATA_DIR to kvserve's data/ folder");
}

Result<std::vector<std::string>> catalog_names() {
  KVS_ASSIGN_OR_RETURN(std::string dir, find_data_dir());
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "models", ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<PlannerModel> load_catalog_model(const std::string& name) {
  KVS_ASSIGN_OR_RETURN(std::string dir, find_data_dir());
  KVS_ASSIGN_OR_RETURN(std::vector<std::string> names, catalog_names());
  const std::string want = lower(name);
  for (const std::string& n : names) {
    const std::string path = (fs::path(dir) / "models" / (n + ".json")).string();
    bool match = lower(n) == want;
    if (!match) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      if (!check_json_nesting(text.str(), path).is_ok()) continue;
      const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("aliases") && j["aliases"].is_array())
        for (const auto& a : j["aliases"])
          if (a.is_string() && lower(a.get<std::string>()) == want) match = true;
    }
    if (match) {
      KVS_ASSIGN_OR_RETURN(PlannerModel m, model_from_json_file(path));
      if (m.name == path) m.name = n;
      return m;
    }
  }
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return not_found("'" + name + "' is not a file and not a catalog model (catalog: " + all + ")");
}

Result<PlannerModel> load_planner_model(const std::string& arg) {
  std::error_code ec;
  if (fs::is_directory(arg, ec)) {
    const fs::path cfg = fs::path(arg) / "config.json";
    if (!fs::exists(cfg, ec)) return not_found(arg + ": directory has no config.json");
    return model_from_json_file(cfg.string());
  }
  if (fs::exists(arg, ec)) {
    if (is_gguf(arg)) {
      KVS_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(arg));
      return model_from_gguf(file, arg);
    }
    return model_from_json_file(arg);
  }
  // A name scripts/fetch-model knows (gemma3-270m, smollm2-135m) means its downloaded GGUF when
  // it is there; otherwise the catalog answers (or says which names it knows).
  for (const KnownModel& m : known_models()) {
    if (arg != m.name) continue;
    auto path = resolve_model_path(arg);
    if (path.is_ok()) return load_planner_model(*path);
  }
  return load_catalog_model(arg);
}

}  // namespace kvs
