#include "model/model_paths.h"

#include <cstdlib>
#include <filesystem>

namespace kvs {

std::string default_model_dir() {
  if (const char* d = std::getenv("KVSERVE_MODEL_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/kvserve/models";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/kvserve/models";
}

std::string default_model_path() { return default_model_dir() + "/" + kDefaultModelFile; }

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> models = {
      {"smollm2-135m", kDefaultModelFile},
      {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf"},
  };
  return models;
}

Result<std::string> resolve_model_path(const std::string& flag) {
  std::error_code ec;
  if (!flag.empty()) {
    if (std::filesystem::is_regular_file(flag, ec)) return flag;
    for (const KnownModel& m : known_models()) {
      if (flag != m.name) continue;
      std::string path = default_model_dir() + "/" + m.file;
      if (!std::filesystem::is_regular_file(path, ec))
        return not_found("model '" + flag + "' is not downloaded yet (expected at " + path +
                         "); run scripts/fetch-model " + flag);
      return path;
    }
    return not_found("model file '" + flag +
                     "' does not exist or is not a regular file (known names: smollm2-135m, "
                     "gemma3-270m)");
  }
  std::string path = default_model_path();
  if (!std::filesystem::is_regular_file(path, ec))
    return not_found("no -m given and the default model is not at " + path +
                     " (run scripts/fetch-model to download it)");
  return path;
}

}  // namespace kvs
