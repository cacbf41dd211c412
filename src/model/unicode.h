// Unicode helpers for the tokenizer: the character classes its pre-tokenizer regexes use (tables
// generated into unicode_tables.cpp by tools/gen_unicode_tables.py) and UTF-8 decoding that
// never fails: invalid input is reported, not trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvs::unicode {

// \p{L}: general category L* (letters of every script).
[[nodiscard]] bool is_letter(char32_t cp);
// \p{N}: general category N* (Nd, Nl, No: decimal digits, Roman numerals, superscripts...).
[[nodiscard]] bool is_number(char32_t cp);
// \s: the White_Space property (ASCII \t\n\v\f\r and space, U+0085, Zs, Zl, Zp).
[[nodiscard]] bool is_whitespace(char32_t cp);

inline constexpr char32_t kReplacementChar = 0xFFFD;

enum class Utf8Status : uint8_t {
  kValid,      // a well-formed character
  kInvalid,    // an ill-formed byte sequence (a stray continuation byte, overlong, surrogate...)
  kTruncated,  // a well-formed prefix of a character that the input ends in the middle of
};

struct Utf8Char {
  char32_t cp;   // the code point; kReplacementChar unless status is kValid
  uint32_t len;  // bytes consumed, >= 1: the character, or the maximal ill-formed subpart
  Utf8Status status;
};

// Decodes the character starting at s[pos] (precondition: pos < s.size()). Ill-formed input is
// consumed in "maximal subparts" (Unicode 3.9, as Rust's from_utf8_lossy and browsers do), so
// each ill-formed subpart becomes exactly one U+FFFD.
[[nodiscard]] inline Utf8Char decode_utf8(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, Utf8Status::kValid};
  uint32_t need;                 // continuation bytes
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the first continuation byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {kReplacementChar, 1, Utf8Status::kInvalid};
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) return {kReplacementChar, k, Utf8Status::kTruncated};
    const uint8_t b = byte(pos + k);
    if (b < lo || b > hi) return {kReplacementChar, k, Utf8Status::kInvalid};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {cp, need + 1, Utf8Status::kValid};
}

// Appends cp (precondition: a Unicode scalar value) as UTF-8.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Appends s to out with every ill-formed subpart replaced by U+FFFD. A truncated character at the
// end counts as ill-formed unless keep_truncated_tail; then its bytes are not appended and the
// return value is their count (so a streaming caller can keep them for later).
inline size_t append_sanitized_utf8(std::string& out, std::string_view s,
                                    bool keep_truncated_tail = false) {
  size_t pos = 0;
  while (pos < s.size()) {
    const Utf8Char c = decode_utf8(s, pos);
    if (c.status == Utf8Status::kValid) {
      out.append(s.substr(pos, c.len));
    } else if (c.status == Utf8Status::kTruncated && keep_truncated_tail) {
      return s.size() - pos;
    } else {
      append_utf8(out, kReplacementChar);
    }
    pos += c.len;
  }
  return 0;
}

}  // namespace kvs::unicode
