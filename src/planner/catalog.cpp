#include "planner/catalog.h"

#include <sstream>

#include "core/json_nesting.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/edit_distance.h"
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

namespace {

// Every spelling that names a catalog entry: its file stem, its "aliases" and its "hf_ids" (the
// Hugging Face repositories whose config.json the entry's values are), lower-cased.
struct CatalogKey {
  std::string key;    // as written (for suggestions)
  std::string entry;  // the file stem it names
};

// The strings of a list field of a catalog file ("aliases", "hf_ids"); none if unreadable.
std::vector<std::string> string_list(const std::string& path, const char* field) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> out;
  if (!check_json_nesting(text.str(), path).is_ok()) return out;
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(field) || !j[field].is_array()) return out;
  for (const auto& a : j[field])
    if (a.is_string()) out.push_back(a.get<std::string>());
  return out;
}

std::string entry_path(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / "models" / (name + ".json")).string();
}

std::vector<CatalogKey> catalog_keys(const std::string& dir,
                                     const std::vector<std::string>& names) {
  std::vector<CatalogKey> keys;
  for (const std::string& n : names) {
    keys.push_back({n, n});
    for (const char* field : {"aliases", "hf_ids"})
      for (std::string& k : string_list(entry_path(dir, n), field)) keys.push_back({k, n});
  }
  return keys;
}

// Up to three keys close to `want` (lower-cased): by edit distance, of the whole spelling or of
// the part after "org/", within a third of the length; or one spelling plus "-suffix" of the other.
std::vector<std::string> close_matches(const std::string& want,
                                       const std::vector<CatalogKey>& keys) {
  const auto tail = [](const std::string& s) {
    const size_t slash = s.rfind('/');
    return slash == std::string::npos ? s : s.substr(slash + 1);
  };
  // (distance, distance of the whole spelling, key): ties go to the closer whole spelling, so
  // a mistyped Hugging Face id suggests the id before a catalog alias with the same tail.
  std::vector<std::tuple<size_t, size_t, std::string>> scored;
  for (const CatalogKey& k : keys) {
    const std::string key = lower(k.key);
    const size_t whole = edit_distance(want, key);
    size_t d = std::min(whole, edit_distance(tail(want), tail(key)));
    // "Qwen3-8B-Instruct" for "Qwen3-8B": a known spelling plus a suffix is close too.
    const std::string a = tail(want), b = tail(key);
    if (a.rfind(b + "-", 0) == 0 || b.rfind(a + "-", 0) == 0) d = std::min<size_t>(d, 1);
    if (d <= std::max<size_t>(2, tail(want).size() / 3)) scored.emplace_back(d, whole, k.key);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) {
    return std::tie(std::get<0>(x), std::get<1>(x)) < std::tie(std::get<0>(y), std::get<1>(y));
  });
  std::vector<std::string> out;
  for (const auto& [d, whole, key] : scored)
    if (out.size() < 3 && std::find(out.begin(), out.end(), key) == out.end()) out.push_back(key);
  return out;
}

}  // namespace

Result<std::vector<std::string>> catalog_hf_ids(const std::string& name) {
  KVS_ASSIGN_OR_RETURN(std::string dir, find_data_dir());
  return string_list(entry_path(dir, name), "hf_ids");
}

Result<PlannerModel> load_catalog_model(const std::string& name) {
  KVS_ASSIGN_OR_RETURN(std::string dir, find_data_dir());
  KVS_ASSIGN_OR_RETURN(std::vector<std::string> names, catalog_names());
  const std::string want = lower(name);
  const std::vector<CatalogKey> keys = catalog_keys(dir, names);
  for (const CatalogKey& k : keys) {
    if (lower(k.key) != want) continue;
    const std::string path = entry_path(dir, k.entry);
    KVS_ASSIGN_OR_RETURN(PlannerModel m, model_from_json_file(path));
    if (m.name == path) m.name = k.entry;
    return m;
  }
  std::string msg = "'" + name +
                    "' is not a file, a directory, a catalog name or a Hugging Face id " +
                    "the catalog knows (kvserve downloads nothing: save the model's config.json " +
                    "and give its path)";
  const std::vector<std::string> close = close_matches(want, keys);
  if (!close.empty()) {
    msg += "; did you mean ";
    for (size_t i = 0; i < close.size(); ++i)
      msg += (i == 0 ? "" : i + 1 == close.size() ? " or " : ", ") + close[i];
    msg += "?";
  }
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return not_found(msg + " (catalog: " + all + "; --list-models shows the Hugging Face ids)");
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
