// Byte-level BPE tokenizer (GPT-2 / Hugging Face `tokenizers` style), built from plain vectors so
// that it does not depend on where the vocabulary came from (GGUF metadata, a test's hand-made
// vocabulary).
//
// encode(): split out special tokens, pre-tokenize each remaining segment with the model's regex
// rules (PreTokenizer), map each piece's bytes to the GPT-2 byte-level alphabet and apply merges
// lowest rank first (leftmost first among equal ranks), as HF's BPE model does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/pre_tokenizer.h"

namespace kvs {

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>, <|endoftext|>: matched in text only with parse_special
  kUserDefined = 4,  // added tokens: always matched in text as a whole (as HF and llama.cpp do)
  kUnused = 5,
  kByte = 6,  // "<0xAB>": the single raw byte 0xAB
};

// The tokenizer model (GGUF tokenizer.ggml.model): byte-level BPE with merges ("gpt2": GPT-2,
// Llama 3, SmolLM, Qwen) or SentencePiece BPE with scores ("llama": Llama 2, Gemma;
// sentencepiece_bpe.h).
enum class TokenizerModel : uint8_t { kByteLevelBpe, kSentencePiece };

struct TokenizerConfig {
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  // Token strings as stored: GPT-2 byte-level encoded (byte-level BPE), or with spaces as U+2581
  // and <0xNN> byte tokens (SentencePiece).
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // same length, or empty (all normal)
  std::vector<std::string> merges;   // "left right", rank = index (byte-level BPE)
  std::vector<float> scores;         // one per token: merge priority (SentencePiece)
  bool add_space_prefix = false;     // SentencePiece: a "▁" before the text
  std::string pre = "gpt2";          // pre-tokenizer name from tokenizer.ggml.pre
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false, add_eos = false;
  std::vector<int32_t> extra_eog_ids;  // e.g. <|im_end|>, <|endoftext|>
};

// Invariants after create(): every id it holds (bos, eos, unk, pad, extra eog, merge parts) is in
// [0, vocab_size()); every merge "a b" names tokens a, b and ab of the vocabulary. Immutable, so
// one Tokenizer may be used from many threads at once.
class Tokenizer {
 public:
  // Validates the config: non-empty vocabulary, token_types empty or one per token, ids in
  // range, merges of the form "left right" whose parts and concatenation are tokens, add_bos /
  // add_eos only with a bos / eos id, a known pre-tokenizer.
  static Result<Tokenizer> create(TokenizerConfig config);

  // Tokenizes UTF-8 text (ill-formed bytes are tokenized byte by byte too, never dropped, as
  // long as the vocabulary has the 256 byte tokens). add_special: prepend bos / append eos as
  // the config says. parse_special: the text of a control token (e.g. "<|im_start|>") becomes that
  // token (longest match first); otherwise it is ordinary text. User-defined tokens are always
  // matched, as in HF tokenizers and llama.cpp. A byte without a token becomes unk, or is
  // dropped when there is no unk (as HF's BPE does).
  [[nodiscard]] std::vector<int32_t> encode(std::string_view utf8, bool add_special,
                                            bool parse_special) const;
  // A rendered template: like encode(utf8, add_special, parse_special = true), except that no
  // special token is matched inside (or overlapping) the byte ranges [begin, end) of
  // `plain_ranges` (sorted, disjoint): untrusted text such as chat message content, which thus
  // cannot spell a control token. Elsewhere the tokens are exactly those of encode(), so text
  // without special-token strings encodes the same either way.
  [[nodiscard]] std::vector<int32_t> encode_template(
      std::string_view utf8, bool add_special,
      std::span<const std::pair<size_t, size_t>> plain_ranges) const;
  // An upper bound on the bytes of text one token stands for: a text longer than
  // n * max_token_bytes() bytes cannot encode to n tokens or fewer.
  [[nodiscard]] size_t max_token_bytes() const { return max_token_bytes_; }

  // The text of ids: normal tokens' raw bytes, control / user-defined tokens as their text
  // (control tokens and bos/eos left out when skip_special), concatenated; ill-formed UTF-8
  // (e.g. a character cut in half at the end) becomes U+FFFD. Precondition: ids in range.
  [[nodiscard]] std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The token's string as stored (byte-level encoded for normal tokens, e.g. "Ġthe").
  [[nodiscard]] std::string_view token_text(int32_t id) const;
  // The raw bytes the token stands for (" the"); for control / user-defined tokens their text.
  // May be a partial UTF-8 character.
  [[nodiscard]] std::string token_bytes(int32_t id) const;
  [[nodiscard]] TokenType token_type(int32_t id) const;
  // Control tokens, and bos / eos: what decode(skip_special=true) leaves out.
  [[nodiscard]] bool is_special(int32_t id) const;

  [[nodiscard]] int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // End of generation: eos, the config's extra_eog_ids, and control / user-defined tokens named
  // like an end-of-turn token (<|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, ...).
  [[nodiscard]] bool is_eog(int32_t id) const;
  [[nodiscard]] std::optional<int32_t> bos_id() const { return bos_id_; }
  // What encode(add_special = true) adds around the text.
  [[nodiscard]] bool adds_bos() const { return add_bos_; }
  [[nodiscard]] bool adds_eos() const { return add_eos_; }
  [[nodiscard]] std::optional<int32_t> eos_id() const { return eos_id_; }
  [[nodiscard]] std::optional<int32_t> unk_id() const { return unk_id_; }
  [[nodiscard]] std::optional<int32_t> pad_id() const { return pad_id_; }
  [[nodiscard]] PreTokenizer pre_tokenizer() const { return pre_; }
  [[nodiscard]] TokenizerModel model() const { return model_; }
  // The id of the token stored as `text` (byte-level encoded form for normal tokens).
  [[nodiscard]] std::optional<int32_t> find_token(std::string_view text) const;

 private:
  struct SpecialToken {
    std::string text;
    int32_t id;
    bool needs_parse_special;  // control tokens; user-defined ones are always matched
  };

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct EncodeCache;  // per encode() call: piece -> its tokens

  Tokenizer() = default;
  // (rank, merged id) of merging left and right, or nullopt.
  [[nodiscard]] const uint64_t* find_merge(int32_t left, int32_t right) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // `at_start`: the segment begins the text (SentencePiece's add_space_prefix applies there).
  void encode_segment(std::string_view text, bool at_start, EncodeCache& cache,
                      std::vector<int32_t>& out) const;
  [[nodiscard]] std::vector<int32_t> encode_impl(
      std::string_view utf8, bool add_special, bool parse_special,
      std::span<const std::pair<size_t, size_t>> plain_ranges) const;
  void append_token_bytes(int32_t id, std::string& out) const;

  std::vector<std::string> tokens_;
  size_t max_token_bytes_ = 1;
  TokenizerModel model_ = TokenizerModel::kByteLevelBpe;
  std::vector<float> scores_;  // SentencePiece
  bool add_space_prefix_ = false;
  std::vector<TokenType> types_;
  std::vector<uint8_t> flags_;  // kFlag* per token
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_ids_;
  // Merges as an open-addressing hash table (linear probing, power-of-two size): key
  // (left << 32 | right), value (rank << 32 | merged id); kEmptyKey marks a free slot.
  std::vector<uint64_t> merge_keys_;
  std::vector<uint64_t> merge_values_;
  int merge_shift_ = 64;          // slot = (key * golden ratio) >> merge_shift_
  int32_t byte_token_[256] = {};  // token of each byte's GPT-2 character, -1 if none
  // Matchable special tokens sorted by (first byte, length descending); the ones starting with
  // byte b are specials_[special_begin_[b] .. special_begin_[b + 1]).
  std::vector<SpecialToken> specials_;
  uint32_t special_begin_[257] = {};
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  bool ignore_merges_ = false;  // llama3: a piece that is a whole token is not merged
  std::optional<int32_t> bos_id_, eos_id_, unk_id_, pad_id_;
  bool add_bos_ = false, add_eos_ = false;
};

}  // namespace kvs
