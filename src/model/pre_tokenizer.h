// PreTokenizer: how a byte-level BPE tokenizer splits text into pieces before merging, by the
// regexes the GGUF's tokenizer.ggml.pre names, matched by hand (no regex engine).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvs {

// The regex rules that split text into pieces before BPE.
enum class PreTokenizer : uint8_t {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Every \p{N} is its own piece, then kGpt2 on the rest (HF Sequence[Digits(individual_digits),
  // ByteLevel(use_regex)], SmolLM/StarCoder).
  kSmolLm,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Like kLlama3 with \p{N} (single digits) instead of \p{N}{1,3}, as in Qwen2's tokenizer.json.
  kQwen2,
};

// "gpt2", "smollm", "llama-bpe"/"llama3", "qwen2"; anything else is invalid_argument.
[[nodiscard]] Result<PreTokenizer> parse_pre_tokenizer(std::string_view name);

// The pieces text splits into (views into `text`; concatenated they give back `text`). Text that
// is not valid UTF-8 is split too: each ill-formed byte sequence counts as one
// punctuation-like character, so it stays in the output byte for byte.
[[nodiscard]] std::vector<std::string_view> pre_tokenize(PreTokenizer rule, std::string_view text);

}  // namespace kvs
