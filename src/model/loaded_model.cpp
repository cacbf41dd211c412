#include "model/loaded_model.h"

#include <xxhash.h>

#include <algorithm>

namespace kvs {

Result<TokenizerConfig> tokenizer_config_from_gguf(const GgufFile& f) {
  TokenizerConfig c;
  // (Not KVS_ASSIGN_OR_RETURN: GCC 12 reports a false maybe-uninitialized through the variant.)
  const Result<std::string> model = f.get_string("tokenizer.ggml.model");
  if (!model.is_ok()) return model.status();
  if (model.value() == "gpt2") {
    c.model = TokenizerModel::kByteLevelBpe;
  } else if (model.value() == "llama") {
    c.model = TokenizerModel::kSentencePiece;
  } else {
    return unimplemented("tokenizer model '" + model.value() +
                         "' is not supported (kvserve reads gpt2 and llama/SentencePiece BPE)");
  }
  KVS_ASSIGN_OR_RETURN(c.tokens, f.get_string_array("tokenizer.ggml.tokens"));
  if (c.model == TokenizerModel::kByteLevelBpe) {
    KVS_ASSIGN_OR_RETURN(c.merges, f.get_string_array("tokenizer.ggml.merges"));
  } else {
    KVS_ASSIGN_OR_RETURN(std::vector<double> scores, f.get_float_array("tokenizer.ggml.scores"));
    c.scores.assign(scores.begin(), scores.end());
    if (f.find("tokenizer.ggml.add_space_prefix") != nullptr) {
      KVS_ASSIGN_OR_RETURN(c.add_space_prefix, f.get_bool("tokenizer.ggml.add_space_prefix"));
    }
  }
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    KVS_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_int_array("tokenizer.ggml.token_type"));
    c.token_types.assign(types.begin(), types.end());
  }
  if (f.find("tokenizer.ggml.pre") != nullptr) {
    KVS_ASSIGN_OR_RETURN(c.pre, f.get_string("tokenizer.ggml.pre"));
  }
  auto opt_id = [&](const char* key) -> Result<std::optional<int32_t>> {
    if (f.find(key) == nullptr) return std::optional<int32_t>();
    KVS_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
    if (v >= c.tokens.size())
      return invalid_argument(std::string("metadata key '") + key + "' = " + std::to_string(v) +
                              " is outside the vocabulary");
    return std::optional<int32_t>(static_cast<int32_t>(v));
  };
  KVS_ASSIGN_OR_RETURN(c.bos_id, opt_id("tokenizer.ggml.bos_token_id"));
  KVS_ASSIGN_OR_RETURN(c.eos_id, opt_id("tokenizer.ggml.eos_token_id"));
  KVS_ASSIGN_OR_RETURN(c.unk_id, opt_id("tokenizer.ggml.unknown_token_id"));
  KVS_ASSIGN_OR_RETURN(c.pad_id, opt_id("tokenizer.ggml.padding_token_id"));
  if (f.find("tokenizer.ggml.add_bos_token") != nullptr) {
    KVS_ASSIGN_OR_RETURN(c.add_bos, f.get_bool("tokenizer.ggml.add_bos_token"));
  }
  if (f.find("tokenizer.ggml.add_eos_token") != nullptr) {
    KVS_ASSIGN_OR_RETURN(c.add_eos, f.get_bool("tokenizer.ggml.add_eos_token"));
  }
  for (const char* eog :
       {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>"}) {
    auto it = std::find(c.tokens.begin(), c.tokens.end(), eog);
    if (it != c.tokens.end())
      c.extra_eog_ids.push_back(static_cast<int32_t>(it - c.tokens.begin()));
  }
  return c;
}

Result<LoadedModel> load_model(const std::string& path) {
  LoadedModel m;
  m.path = path;
  KVS_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  m.file = std::make_unique<GgufFile>(std::move(file));
  KVS_ASSIGN_OR_RETURN(m.spec, model_spec_from_gguf(*m.file));
  KVS_RETURN_IF_ERROR(check_engine_support(m.spec));
  // Fingerprint (the identity of cached KV, in memory and in the disk tier): file size, data
  // offset, every byte of the metadata and tensor table, and each tensor's first bytes. Taken
  // before the weights are packed and the file's pages under them released.
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const uint64_t sizes[2] = {m.file->file_size(), m.file->data_offset()};
  XXH3_64bits_update(st, sizes, sizeof sizes);
  const std::span<const uint8_t> header = m.file->header_bytes();
  XXH3_64bits_update(st, header.data(), header.size());
  for (const GgufTensorInfo& t : m.file->tensors()) {
    XXH3_64bits_update(st, t.name.data(), t.name.size());
    XXH3_64bits_update(st, t.data, std::min<uint64_t>(t.size_bytes, 256));
  }
  m.fingerprint = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  KVS_ASSIGN_OR_RETURN(TransformerModel model, TransformerModel::load(*m.file, m.spec));
  m.model = std::make_unique<TransformerModel>(std::move(model));
  KVS_ASSIGN_OR_RETURN(TokenizerConfig tc, tokenizer_config_from_gguf(*m.file));
  KVS_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::create(std::move(tc)));
  m.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
  if (m.tokenizer->vocab_size() != static_cast<int32_t>(m.spec.vocab_size))
    return invalid_argument("tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                            " tokens but the model's vocabulary is " +
                            std::to_string(m.spec.vocab_size));
  if (m.file->find("tokenizer.chat_template") != nullptr) {
    KVS_ASSIGN_OR_RETURN(std::string tmpl, m.file->get_string("tokenizer.chat_template"));
    auto ct = ChatTemplate::from_template_string(tmpl);
    if (ct.is_ok()) m.chat_template = std::move(ct).value();
  }
  for (int32_t id = 0; id < m.tokenizer->vocab_size(); ++id)
    if (m.tokenizer->is_eog(id)) m.eog_ids.push_back(id);
  return m;
}

}  // namespace kvs
