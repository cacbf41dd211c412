// SentencePiece BPE (GGUF tokenizer.ggml.model = "llama": Llama 2, Gemma, ...), as SentencePiece
// and llama.cpp encode it: spaces are spelled U+2581 ("▁"), the text is split into UTF-8
// characters, and adjacent pieces whose concatenation is a vocabulary token are merged, the pair
// whose merged token has the highest score first (the leftmost among equal scores), until no pair
// merges. A final piece that is no token (a character the vocabulary lacks) falls back to its
// bytes' <0xNN> tokens. Special and user-defined tokens are split out before (tokenizer.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvs {

// Spaces -> "▁" (and a leading "▁" when add_space_prefix): the text the merges run on.
[[nodiscard]] std::string spm_escape(std::string_view text, bool add_space_prefix);

// Appends the ids of `escaped` (spm_escape's output) to `out`. find_token: the id of a
// vocabulary string; score: a token's merge priority (higher first); byte_token: the id of the
// <0xNN> token of a byte (-1 if none: the byte is dropped, as SentencePiece without byte
// fallback maps it to unk, which the caller may prefer to pass as unk_id).
void spm_encode(std::string_view escaped,
                const std::function<std::optional<int32_t>(std::string_view)>& find_token,
                const std::function<float(int32_t)>& score, const int32_t* byte_token,
                std::optional<int32_t> unk_id, std::vector<int32_t>& out);

}  // namespace kvs
