#include "model/gguf_window_pattern.h"

#include <string_view>

#include "model/gguf_file.h"

namespace kvs {
namespace {

struct ArchWindowRow {
  std::string_view arch;
  uint32_t period = 0;          // 0: the architecture never windows (the stored window ignored)
  uint32_t default_window = 0;  // when the file stores none
  bool needs_stored_window = false;  // only when the file stores sliding_window > 0
  uint32_t only_with_layers = 0;     // exaone4: only the 64-layer model
  bool chunked = false;
  uint32_t kv_shared_from = 0;
};

constexpr ArchWindowRow kRows[] = {
    {.arch = "gemma2", .period = 2, .default_window = 4096},
    {.arch = "gemma3", .period = 6, .needs_stored_window = true},
    {.arch = "gemma3n", .period = 5, .kv_shared_from = 20},
    {.arch = "gemma-embedding", .period = 6},
    {.arch = "cohere2", .period = 4},
    {.arch = "gpt-oss", .period = 2},
    {.arch = "llama4", .period = 4, .default_window = 8192, .chunked = true},
    {.arch = "olmo2", .period = 4, .needs_stored_window = true},
    {.arch = "exaone4", .period = 4, .default_window = 4096, .only_with_layers = 64},
    {.arch = "phi3", .period = 0},
};

const ArchWindowRow* find_row(std::string_view arch) {
  for (const ArchWindowRow& r : kRows)
    if (r.arch == arch) return &r;
  return nullptr;
}

constexpr uint64_t kMaxWindow = uint64_t{1} << 24;

}  // namespace

Result<GgufWindowLayout> gguf_window_layout(const GgufFile& f, const std::string& arch,
                                            uint64_t n_layers) {
  const std::string a = arch + ".";
  GgufWindowLayout out;
  out.windowed.assign(n_layers, false);
  const ArchWindowRow* row = find_row(arch);
  if (row != nullptr) out.kv_shared_from = row->kv_shared_from < n_layers ? row->kv_shared_from : 0;

  const std::string window_key = a + "attention.sliding_window";
  const bool stored = f.find(window_key) != nullptr;
  uint64_t window = 0;
  if (stored) {
    KVS_ASSIGN_OR_RETURN(window, f.get_uint(window_key));
    if (window > kMaxWindow)
      return invalid_argument("metadata key '" + window_key + "' is implausibly large");
  }
  if (row != nullptr) {
    if (row->period == 0) return out;  // phi3: llama.cpp runs full attention
    if (row->only_with_layers != 0 && row->only_with_layers != n_layers) return out;
    if (row->needs_stored_window && window == 0) return out;
    if (row->chunked) {
      if (stored && window == 0) return out;  // llama4 files that turn chunking off
      window = row->default_window;           // llama.cpp's n_swa, whatever the file stores
      out.chunked = true;
    } else if (!stored) {
      window = row->default_window;
    }
  }
  if (window == 0) return out;
  out.window = static_cast<uint32_t>(window);

  // The file's own pattern wins over the table (llama.cpp reads it with get_key_or_arr).
  const std::string pattern_key = a + "attention.sliding_window_pattern";
  if (const GgufValue* pv = f.find(pattern_key); pv != nullptr) {
    if (pv->type() == GgufType::kArray) {
      if (pv->array_size() != n_layers || pv->array_type() != GgufType::kBool)
        return invalid_argument("metadata key '" + pattern_key + "' must hold one bool per layer");
      for (uint64_t i = 0; i < n_layers; ++i) out.windowed[i] = pv->element(i).to_bool().value();
      return out;
    }
    KVS_ASSIGN_OR_RETURN(uint64_t p, f.get_uint(pattern_key));
    for (uint64_t i = 0; i < n_layers; ++i) out.windowed[i] = p == 0 || (i + 1) % p != 0;
    return out;
  }
  const uint64_t period = row != nullptr ? row->period : 0;
  for (uint64_t i = 0; i < n_layers; ++i) out.windowed[i] = period == 0 || i % period < period - 1;
  return out;
}

}  // namespace kvs
