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

Result<std::string> resolve_model_path(const std::string& flag) {
  std::error_code ec;
  if (!flag.empty()) {
    if (!std::filesystem::is_regular_file(flag, ec))
      return not_found("model file '" + flag + "' does not exist or is not a regular file");
    return flag;
  }
  std::string path = default_model_path();
  if (!std::filesystem::is_regular_file(path, ec))
    return not_found("no -m given and the default model is not at " + path +
                     " (run scripts/fetch-model to download it)");
  return path;
}

}  // namespace kvs
