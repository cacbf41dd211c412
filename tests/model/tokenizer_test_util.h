// Tiny hand-made vocabularies for tokenizer tests (tests/model, tests/server): the GPT-2 byte
// characters written out independently of the tokenizer, and a ChatML-like vocabulary.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"
#include "model/unicode.h"

namespace kvs::test {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string_view>;

// The GPT-2 byte-level character of a byte, written out independently of tokenizer.cpp.
inline std::string byte_char(uint8_t b) {
  int n = 0;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    if (x == b) {
      std::string s;
      unicode::append_utf8(s, printable ? static_cast<char32_t>(x) : char32_t(256 + n));
      return s;
    }
    if (!printable) ++n;
  }
  return {};
}

// Byte-level form of a raw string ("a b" -> "aĠb").
inline std::string bl(std::string_view raw) {
  std::string s;
  for (char c : raw) s += byte_char(static_cast<uint8_t>(c));
  return s;
}

// A vocabulary of the 256 byte tokens (id = byte value) followed by `extra` tokens.
inline TokenizerConfig byte_vocab(const std::vector<std::string>& extra = {}) {
  TokenizerConfig c;
  for (int b = 0; b < 256; ++b) c.tokens.push_back(byte_char(static_cast<uint8_t>(b)));
  for (const auto& t : extra) c.tokens.push_back(t);
  return c;
}

inline Tokenizer make(TokenizerConfig c) {
  auto t = Tokenizer::create(std::move(c));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

inline int32_t id_of(const Tokenizer& t, std::string_view text) {
  const auto id = t.find_token(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

// 256 byte tokens, then control tokens 256..259 (<|endoftext|>, <|im_start|> = bos,
// <|im_end|> = eos, <|im), a user-defined <tool> (260) and a few merged words.
inline TokenizerConfig chat_vocab() {
  TokenizerConfig c = byte_vocab(
      {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im", "<tool>", "hi", "us", "er", "user"});
  c.token_types.assign(c.tokens.size(), 1);
  c.token_types[256] = c.token_types[257] = c.token_types[258] = c.token_types[259] = 3;
  c.token_types[260] = 4;  // user-defined
  c.merges = {"h i", "u s", "e r", "us er"};
  c.pre = "smollm";
  c.bos_id = 257;
  c.eos_id = 258;
  c.unk_id = 256;
  return c;
}

}  // namespace kvs::test
