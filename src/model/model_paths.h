// Where kvserve looks for models: the default model's cache path (scripts/fetch-model puts it
// there) and the resolution of the -m flag.
#pragma once

#include <string>

#include "core/status.h"

namespace kvs {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $KVSERVE_MODEL_DIR, else $XDG_CACHE_HOME/kvserve/models, else ~/.cache/kvserve/models.
[[nodiscard]] std::string default_model_dir();
// default_model_dir()/kDefaultModelFile (whether or not it exists).
[[nodiscard]] std::string default_model_path();
// `flag` if non-empty, else the default model; a clear error naming scripts/fetch-model when the
// file does not exist.
[[nodiscard]] Result<std::string> resolve_model_path(const std::string& flag);

}  // namespace kvs
