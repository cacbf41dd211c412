// LoadedModel: everything `-m MODEL.gguf` brings — the mapped file, its shape, the bound
// weights, the tokenizer and the chat template — loaded and validated in one call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "model/model_spec.h"
#include "model/tokenizer.h"
#include "model/transformer_model.h"

namespace kvs {

struct LoadedModel {
  std::string path;
  std::unique_ptr<GgufFile> file;  // the mapping the weights point into
  ModelSpec spec;
  std::unique_ptr<TransformerModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  // Identifies the weights in prefix-cache keys (hash of the file's size, header and metadata).
  uint64_t fingerprint = 0;
  // Tokens that end generation (EOS, <|im_end|>, <|endoftext|>, <|eot_id|> ... when present).
  std::vector<int32_t> eog_ids;
};

[[nodiscard]] Result<TokenizerConfig> tokenizer_config_from_gguf(const GgufFile& file);
[[nodiscard]] Result<LoadedModel> load_model(const std::string& path);

}  // namespace kvs
