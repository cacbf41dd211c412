// ByteAlphabet: GPT-2's byte-level alphabet. Printable bytes stand for themselves, the other 68
// bytes map to U+0100.. in byte order, so every byte string is a string of visible characters.
// Byte-level BPE vocabularies (GPT-2, Llama 3, SmolLM, Qwen) store their tokens in it.
#pragma once

#include <array>
#include <cstdint>

namespace kvs {

struct ByteAlphabet {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // every code point of the alphabet is < 0x144

  ByteAlphabet();
};

// The alphabet (built once).
[[nodiscard]] const ByteAlphabet& byte_alphabet();

}  // namespace kvs
