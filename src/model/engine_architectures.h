// The architectures the engine runs, one row each (llama, gemma3): what the GGUF reader
// (model_spec.cpp) checks a model against, and what architecture.cpp, where the rows and their
// forward-pass descriptions live, builds the Architecture from. This header names ModelSpec and
// Architecture without including them, so the spec reader depends on the list, not on the
// forward pass.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kvs {

struct ModelSpec;
struct Architecture;

// The architectures the engine runs (general.architecture), THE list: check_engine_support
// (model_spec.h) refuses every other, architecture_of describes these, and adding one is a row of
// this table plus its description.
struct EngineArchitecture {
  std::string_view name;  // "llama"
  // Layers with sliding windows (their own KV groups) run; false: uniform full attention only.
  bool sliding_windows = false;
  // The head dimension is embedding / heads (the converters' layout); false: key_length says.
  bool head_dim_is_embedding_over_heads = false;
  // Fills in what differs from the defaults of Architecture (llama's forward pass).
  void (*describe)(const ModelSpec& spec, Architecture* arch) = nullptr;
};
[[nodiscard]] std::span<const EngineArchitecture> engine_architectures();
// The row of `name`, or nullptr when the engine does not run it.
[[nodiscard]] const EngineArchitecture* find_engine_architecture(std::string_view name);
// "llama and gemma3": the list, for messages.
[[nodiscard]] std::string engine_architecture_names();

}  // namespace kvs
