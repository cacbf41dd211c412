// catalog: the built-in models (data/models/<name>.json, one per model: the Hugging Face config
// values that size the KV cache, the parameter count and a "source" naming the config.json they
// came from) and the resolution of `kvserve plan --model M`.
//
// The data folder is the first that exists of: $KVSERVE_DATA_DIR, <exe dir>/../../data (a build
// tree inside the checkout), <exe dir>/../share/kvserve/data (an install), and the source tree's
// data/ compiled in as KVSERVE_SOURCE_DATA_DIR.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "planner/model_config.h"

namespace kvs {

// The candidate data folders in search order (for messages and tests).
[[nodiscard]] std::vector<std::string> data_dir_candidates();
// The first candidate holding a models/ folder, or kNotFound listing where it looked.
[[nodiscard]] Result<std::string> find_data_dir();

// Catalog names (file stems), sorted.
[[nodiscard]] Result<std::vector<std::string>> catalog_names();
// The Hugging Face ids ("hf_ids") of a catalog entry: the repositories whose config.json holds
// the entry's values (e.g. meta-llama/Llama-3.1-8B and its -Instruct).
[[nodiscard]] Result<std::vector<std::string>> catalog_hf_ids(const std::string& name);
// A catalog model by name, case-insensitive: the file stem, its "aliases" or its "hf_ids". The
// error for an unknown name suggests up to three close spellings and lists the catalog.
[[nodiscard]] Result<PlannerModel> load_catalog_model(const std::string& name);

// `--model M`: an existing path is a GGUF file (by its magic), a config.json, or a directory
// holding a config.json; anything else is a catalog name or Hugging Face id (nothing is
// downloaded). Errors list the catalog's names.
[[nodiscard]] Result<PlannerModel> load_planner_model(const std::string& arg);

}  // namespace kvs
