// gguf_window_pattern: which layers of a GGUF model attend through a sliding (or chunked) window.
// A GGUF may say it per file (<arch>.attention.sliding_window_pattern: one bool per layer, or a
// period p: layer i windowed unless (i + 1) % p == 0); most files do not, because llama.cpp keeps
// the layout per architecture in its code (src/llama-model.cpp / src/models/<arch>.cpp:
// swa_type, n_swa and set_swa_pattern(p), which windows layer i when i % p < p - 1). This is that
// table, checked against llama.cpp for each row:
//
//   arch             period  window when the file has none   notes
//   gemma2           2       4096                             layer 0 windowed, 1 full, ...
//   gemma3           6       (none: no window, no pattern)    only when sliding_window > 0
//   gemma3n          5       (file)                           layers >= 20 reuse earlier KV
//   gemma-embedding  6       (file)
//   cohere2          4       (file)
//   gpt-oss          2       (file)                           sliding first, then full
//   llama4           4       8192 chunked                     a stored sliding_window 0 = none
//   olmo2            4       (file)                           only when sliding_window > 0 (OLMo 3)
//   exaone4          4       4096                             only with 64 layers (32B)
//   phi3             -       -                                llama.cpp ignores the stored window
//
// An architecture not in the table that stores a window has every layer windowed (what the file
// says, with nothing to say otherwise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvs {

class GgufFile;

struct GgufWindowLayout {
  std::vector<bool> windowed;   // one per layer
  uint32_t window = 0;          // tokens a windowed layer holds (0: no layer is windowed)
  bool chunked = false;         // the window is an attention chunk (llama4)
  uint32_t kv_shared_from = 0;  // layers from this index reuse earlier layers' KV (0: none)
};

[[nodiscard]] Result<GgufWindowLayout> gguf_window_layout(const GgufFile& f,
                                                          const std::string& arch,
                                                          uint64_t n_layers);

}  // namespace kvs
