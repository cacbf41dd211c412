#include "model/pre_tokenizer.h"

#include "model/unicode.h"

namespace kvs {
namespace {

// Pre-tokenizer: the regexes of tokenizer.h, matched by hand. Each matcher returns where the
// match that starts at i ends (> i), trying the alternatives in the regex's order, as a
// backtracking regex engine's find-all does; every character matches some alternative, so the
// pieces tile the text.

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Chars {
  std::vector<char32_t> cp;  // U+FFFD for an ill-formed subpart
  std::vector<CharClass> cls;
  std::vector<uint8_t> len;  // bytes of each character (1..4)

  explicit Chars(std::string_view text) {
    cp.reserve(text.size());
    cls.reserve(text.size());
    len.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      const unicode::Utf8Char c = unicode::decode_utf8(text, pos);
      CharClass k = CharClass::kOther;  // ill-formed bytes are like punctuation
      if (c.status == unicode::Utf8Status::kValid) {
        if (unicode::is_letter(c.cp)) {
          k = CharClass::kLetter;
        } else if (unicode::is_number(c.cp)) {
          k = CharClass::kNumber;
        } else if (unicode::is_whitespace(c.cp)) {
          k = CharClass::kSpace;
        }
      }
      cp.push_back(c.cp);
      cls.push_back(k);
      len.push_back(static_cast<uint8_t>(c.len));
      pos += c.len;
    }
  }
  [[nodiscard]] size_t size() const { return cp.size(); }
  // End of the run of class k starting at i (< end).
  [[nodiscard]] size_t run(size_t i, size_t end, CharClass k) const {
    while (i < end && cls[i] == k) ++i;
    return i;
  }
};

bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

enum class CaseMode : uint8_t {
  kExact,
  kIgnoreCase,  // (?i:...): Unicode simple case folding, where U+017F (long s) folds to 's' too
};

// 's|'t|'re|'ve|'m|'ll|'d in the given case mode; 0 when none matches at i.
size_t match_contraction(const Chars& c, size_t i, size_t end, CaseMode mode) {
  if (c.cp[i] != '\'' || i + 1 >= end) return 0;
  const auto at = [&](size_t k) -> char32_t {
    char32_t ch = c.cp[k];
    if (mode == CaseMode::kExact) return ch;
    if (ch == 0x17F) return char32_t{'s'};
    return (ch >= 'A' && ch <= 'Z') ? ch + 32 : ch;
  };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 >= end) return 0;
  const char32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

// \s+(?!\S)|\s+ at i (a whitespace character): the whole run when it ends the text or is one
// character long, else the run less its last character (which then prefixes the next piece).
size_t match_whitespace_tail(const Chars& c, size_t i, size_t end) {
  const size_t j = c.run(i, end, CharClass::kSpace);
  if (j == end || j - i == 1) return j;
  return j - 1;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Chars& c, size_t i, size_t end) {
  if (const size_t j = match_contraction(c, i, end, CaseMode::kExact)) return j;
  const CharClass k = c.cls[i];
  if (k == CharClass::kSpace) {
    if (c.cp[i] == ' ' && i + 1 < end && c.cls[i + 1] != CharClass::kSpace) {
      return c.run(i + 1, end, c.cls[i + 1]);  // " ?X+" with the optional space
    }
    return match_whitespace_tail(c, i, end);
  }
  return c.run(i, end, k);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3(const Chars& c, size_t i, size_t end, size_t max_digits) {
  if (const size_t j = match_contraction(c, i, end, CaseMode::kIgnoreCase)) return j;
  const CharClass k = c.cls[i];
  if (k == CharClass::kLetter) return c.run(i, end, k);
  if (k == CharClass::kNumber) return std::min(c.run(i, end, k), i + max_digits);
  // [^\r\n\p{L}\p{N}]?\p{L}+ with the optional prefix (space or punctuation).
  if (!is_newline(c.cp[i]) && i + 1 < end && c.cls[i + 1] == CharClass::kLetter) {
    return c.run(i + 1, end, CharClass::kLetter);
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t p = i;
  if (c.cp[i] == ' ' && i + 1 < end && c.cls[i + 1] == CharClass::kOther) p = i + 1;
  if (c.cls[p] == CharClass::kOther) {
    size_t j = c.run(p, end, CharClass::kOther);
    while (j < end && is_newline(c.cp[j])) ++j;
    return j;
  }
  // k is kSpace. \s*[\r\n]+: up to and including the run's last newline.
  const size_t run_end = c.run(i, end, CharClass::kSpace);
  for (size_t q = run_end; q > i; --q) {
    if (is_newline(c.cp[q - 1])) return q;
  }
  return match_whitespace_tail(c, i, end);
}

template <typename F>
void for_each_piece(PreTokenizer rule, std::string_view text, F&& emit) {
  if (text.empty()) return;
  const Chars c(text);
  size_t pos = 0;  // byte offset of the next piece: pieces come in order and tile the text
  const auto piece = [&](size_t i, size_t j) {
    size_t bytes = 0;
    for (size_t k = i; k < j; ++k) bytes += c.len[k];
    emit(text.substr(pos, bytes));
    pos += bytes;
  };
  const size_t n = c.size();
  switch (rule) {
    case PreTokenizer::kGpt2:
      for (size_t i = 0; i < n;) {
        const size_t j = match_gpt2(c, i, n);
        piece(i, j);
        i = j;
      }
      break;
    case PreTokenizer::kSmolLm:
      // Each \p{N} alone; the gpt2 rule within each run between them (its lookahead sees the
      // run's end, not the digit after it).
      for (size_t i = 0; i < n;) {
        if (c.cls[i] == CharClass::kNumber) {
          piece(i, i + 1);
          ++i;
          continue;
        }
        size_t end = i;
        while (end < n && c.cls[end] != CharClass::kNumber) ++end;
        while (i < end) {
          const size_t j = match_gpt2(c, i, end);
          piece(i, j);
          i = j;
        }
      }
      break;
    case PreTokenizer::kLlama3:
    case PreTokenizer::kQwen2: {
      const size_t max_digits = rule == PreTokenizer::kLlama3 ? 3 : 1;
      for (size_t i = 0; i < n;) {
        const size_t j = match_llama3(c, i, n, max_digits);
        piece(i, j);
        i = j;
      }
      break;
    }
  }
}

}  // namespace

Result<PreTokenizer> parse_pre_tokenizer(std::string_view name) {
  if (name == "gpt2" || name.empty()) return PreTokenizer::kGpt2;
  if (name == "smollm") return PreTokenizer::kSmolLm;
  if (name == "llama-bpe" || name == "llama3") return PreTokenizer::kLlama3;
  if (name == "qwen2") return PreTokenizer::kQwen2;
  return invalid_argument("unsupported tokenizer pre-tokenizer '" + std::string(name) +
                          "' (supported: gpt2, smollm, llama-bpe, llama3, qwen2)");
}

std::vector<std::string_view> pre_tokenize(PreTokenizer rule, std::string_view text) {
  std::vector<std::string_view> pieces;
  for_each_piece(rule, text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace kvs
