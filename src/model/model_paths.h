// Where kvserve looks for models: the default model's cache path (scripts/fetch-model puts it
// there) and the resolution of the -m flag.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kvs {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $KVSERVE_MODEL_DIR, else $XDG_CACHE_HOME/kvserve/models, else ~/.cache/kvserve/models.
[[nodiscard]] std::string default_model_dir();
// default_model_dir()/kDefaultModelFile (whether or not it exists).
[[nodiscard]] std::string default_model_path();
// The models scripts/fetch-model knows, by the name it takes: "smollm2-135m", "gemma3-270m".
struct KnownModel {
  const char* name;
  const char* file;  // its file name in default_model_dir()
};
[[nodiscard]] const std::vector<KnownModel>& known_models();

// `flag` may be a path or a known model's name (a path that exists wins); empty means the default
// model. A clear error naming scripts/fetch-model when the file does not exist.
[[nodiscard]] Result<std::string> resolve_model_path(const std::string& flag);

}  // namespace kvs
