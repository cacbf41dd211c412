// Utf8StreamDecoder: turns a sample's tokens into text as they arrive (the server's streams,
// `kvserve generate`'s output), never emitting half a
// UTF-8 character (a character split across tokens is held back until it is complete).
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer.h"

namespace kvs {

// Streams the text of generated tokens without ever emitting half a UTF-8 character (a 4-byte
// emoji may be split over two or more tokens). push() returns the longest well-formed prefix of
// what has accumulated (ill-formed bytes that can never complete become U+FFFD at once); flush()
// returns the rest, a cut-off character becoming U+FFFD. Holds a reference: the tokenizer must
// outlive it.
class Utf8StreamDecoder {
 public:
  explicit Utf8StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  [[nodiscard]] std::string push(int32_t id);
  [[nodiscard]] std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete character, at most 3
};

}  // namespace kvs
