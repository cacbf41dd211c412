#include "model/byte_alphabet.h"

namespace kvs {

ByteAlphabet::ByteAlphabet() {
  cp_to_byte.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
    cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
  }
}

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet kAlphabet;
  return kAlphabet;
}

}  // namespace kvs
