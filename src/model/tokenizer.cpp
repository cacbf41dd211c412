#include "model/tokenizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <queue>
#include <utility>

#include "model/byte_alphabet.h"
#include "model/pre_tokenizer.h"
#include "model/sentencepiece_bpe.h"
#include "model/unicode.h"

namespace kvs {
namespace {

constexpr uint64_t kEmptyKey = ~uint64_t{0};
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

constexpr uint8_t kFlagSpecial = 1;  // left out by decode(skip_special)
constexpr uint8_t kFlagEog = 2;

constexpr std::string_view kEogNames[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
    "<|end|>",    "<end_of_turn>", "<|return|>", "<|call|>",   "<|END_OF_TURN_TOKEN|>",
};

}  // namespace

Result<Tokenizer> Tokenizer::create(TokenizerConfig config) {
  const size_t n = config.tokens.size();
  if (n == 0) return invalid_argument("tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) return invalid_argument("tokenizer: vocabulary too big");
  if (!config.token_types.empty() && config.token_types.size() != n) {
    return invalid_argument("tokenizer: " + std::to_string(config.token_types.size()) +
                            " token types for " + std::to_string(n) + " tokens");
  }
  const auto check_id = [&](const std::optional<int32_t>& id, const char* what) -> Status {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      return invalid_argument(std::string("tokenizer: ") + what + " id " + std::to_string(*id) +
                              " outside the vocabulary of " + std::to_string(n));
    }
    return Status::ok();
  };
  KVS_RETURN_IF_ERROR(check_id(config.bos_id, "bos"));
  KVS_RETURN_IF_ERROR(check_id(config.eos_id, "eos"));
  KVS_RETURN_IF_ERROR(check_id(config.unk_id, "unk"));
  KVS_RETURN_IF_ERROR(check_id(config.pad_id, "pad"));
  for (int32_t id : config.extra_eog_ids) KVS_RETURN_IF_ERROR(check_id(id, "end-of-generation"));
  if (config.add_bos && !config.bos_id) return invalid_argument("tokenizer: add_bos without bos");
  if (config.add_eos && !config.eos_id) return invalid_argument("tokenizer: add_eos without eos");

  Tokenizer t;
  t.model_ = config.model;
  if (t.model_ == TokenizerModel::kSentencePiece) {
    if (config.scores.size() != n)
      return invalid_argument("tokenizer: " + std::to_string(config.scores.size()) +
                              " scores for " + std::to_string(n) + " tokens");
    t.scores_ = std::move(config.scores);
    t.add_space_prefix_ = config.add_space_prefix;
  }
  // SentencePiece splits only at spaces (sentencepiece_bpe.h); its GGUFs say pre = "default",
  // which, like llama.cpp, it does not read.
  if (t.model_ == TokenizerModel::kByteLevelBpe) {
    KVS_ASSIGN_OR_RETURN(t.pre_, parse_pre_tokenizer(config.pre));
  }
  t.ignore_merges_ = t.pre_ == PreTokenizer::kLlama3;
  t.bos_id_ = config.bos_id;
  t.eos_id_ = config.eos_id;
  t.unk_id_ = config.unk_id;
  t.pad_id_ = config.pad_id;
  t.add_bos_ = config.add_bos;
  t.add_eos_ = config.add_eos;

  t.types_.resize(n, TokenType::kNormal);
  const bool typed = !config.token_types.empty();
  for (size_t i = 0; typed && i < n; ++i) t.types_[i] = TokenType{config.token_types[i]};
  if (!typed) {  // no types: the ids the config names are the control tokens
    for (const auto& id : {config.bos_id, config.eos_id, config.unk_id, config.pad_id}) {
      if (id) t.types_[*id] = TokenType::kControl;
    }
    for (int32_t id : config.extra_eog_ids) t.types_[id] = TokenType::kControl;
  }

  t.tokens_ = std::move(config.tokens);
  t.token_ids_.reserve(n);
  t.flags_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    t.token_ids_.emplace(t.tokens_[i], id);  // the first of duplicate strings wins
    // The stored string is at least as long as the bytes it stands for (byte-level encoding
    // spends one or two bytes per raw byte).
    t.max_token_bytes_ = std::max(t.max_token_bytes_, t.tokens_[i].size());
    const TokenType type = t.types_[i];
    const bool control =
        type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused;
    if (control) t.flags_[i] |= kFlagSpecial;
    if (control || type == TokenType::kUserDefined) {
      if (std::find(std::begin(kEogNames), std::end(kEogNames), t.tokens_[i]) !=
          std::end(kEogNames)) {
        t.flags_[i] |= kFlagEog;
      }
    }
    if ((type == TokenType::kControl || type == TokenType::kUserDefined) && !t.tokens_[i].empty()) {
      t.specials_.push_back({t.tokens_[i], id, type == TokenType::kControl});
    }
  }
  for (const auto& id : {config.bos_id, config.eos_id}) {
    if (id) t.flags_[*id] |= kFlagSpecial;
  }
  if (config.eos_id) t.flags_[*config.eos_id] |= kFlagEog;
  for (int32_t id : config.extra_eog_ids) t.flags_[id] |= kFlagEog;

  std::sort(t.specials_.begin(), t.specials_.end(),
            [](const SpecialToken& a, const SpecialToken& b) {
              if (a.text[0] != b.text[0]) {
                return static_cast<uint8_t>(a.text[0]) < static_cast<uint8_t>(b.text[0]);
              }
              if (a.text.size() != b.text.size()) return a.text.size() > b.text.size();
              return a.id < b.id;
            });
  for (size_t i = 0, b = 0; b <= 256; ++b) {
    while (i < t.specials_.size() && static_cast<uint8_t>(t.specials_[i].text[0]) < b) ++i;
    t.special_begin_[b] = static_cast<uint32_t>(i);
  }

  const ByteAlphabet& alphabet = byte_alphabet();
  for (int b = 0; b < 256; ++b) {
    // The token a lone byte becomes: its byte-level character, or SentencePiece's <0xNN>.
    std::string ch;
    if (t.model_ == TokenizerModel::kSentencePiece) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      ch = hex;
    } else {
      unicode::append_utf8(ch, alphabet.byte_to_cp[b]);
    }
    const auto it = t.token_ids_.find(ch);
    t.byte_token_[b] = it == t.token_ids_.end() ? -1 : it->second;
  }

  // Merges: parse "left right" and fill the open-addressing table (load factor <= 1/2).
  const size_t num_merges = config.merges.size();
  if (num_merges > static_cast<size_t>(INT32_MAX)) return invalid_argument("too many merges");
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, 2 * num_merges));
  t.merge_shift_ = 64 - std::countr_zero(capacity);
  t.merge_keys_.assign(capacity, kEmptyKey);
  t.merge_values_.assign(capacity, 0);
  std::string joined;
  for (size_t rank = 0; rank < num_merges; ++rank) {
    const std::string& m = config.merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos || space + 1 >= m.size()) {
      return invalid_argument("tokenizer: merge " + std::to_string(rank) + " '" + m +
                              "' is not of the form 'left right'");
    }
    const std::string_view left = std::string_view(m).substr(0, space);
    const std::string_view right = std::string_view(m).substr(space + 1);
    joined.assign(left);
    joined.append(right);
    const auto l = t.find_token(left);
    const auto r = t.find_token(right);
    const auto merged = t.find_token(joined);
    if (!l || !r || !merged) {
      return invalid_argument("tokenizer: merge " + std::to_string(rank) + " '" + m +
                              "' names a token that is not in the vocabulary");
    }
    const uint64_t key = pair_key(*l, *r);
    size_t slot = (key * kGolden) >> t.merge_shift_;
    while (t.merge_keys_[slot] != kEmptyKey && t.merge_keys_[slot] != key) {
      slot = (slot + 1) & (capacity - 1);
    }
    if (t.merge_keys_[slot] == key) continue;  // a duplicate merge: the lower rank wins
    t.merge_keys_[slot] = key;
    t.merge_values_[slot] = (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(*merged);
  }
  return t;
}

const uint64_t* Tokenizer::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = merge_keys_.size() - 1;
  for (size_t slot = (key * kGolden) >> merge_shift_;; slot = (slot + 1) & mask) {
    const uint64_t k = merge_keys_[slot];
    if (k == key) return &merge_values_[slot];
    if (k == kEmptyKey) return nullptr;
  }
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const auto it = token_ids_.find(text);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  KVS_CHECK(id >= 0 && id < vocab_size());
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  KVS_CHECK(id >= 0 && id < vocab_size());
  return types_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  KVS_CHECK(id >= 0 && id < vocab_size());
  return (flags_[id] & kFlagSpecial) != 0;
}

bool Tokenizer::is_eog(int32_t id) const {
  KVS_CHECK(id >= 0 && id < vocab_size());
  return (flags_[id] & kFlagEog) != 0;
}

// ---------------------------------------------------------------------------------------------
// BPE of one pre-tokenized piece.

void Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    std::string mapped;
    const ByteAlphabet& alphabet = byte_alphabet();
    for (char ch : piece) unicode::append_utf8(mapped, alphabet.byte_to_cp[uint8_t(ch)]);
    if (const auto id = find_token(mapped)) {
      out.push_back(*id);
      return;
    }
  }
  // Symbols as a doubly linked list over an array; a symbol with id -1 has been merged away.
  struct Symbol {
    int32_t id, prev, next;
  };
  constexpr size_t kInline = 64;
  Symbol inline_symbols[kInline];
  std::vector<Symbol> heap_symbols;
  Symbol* sym = inline_symbols;
  if (piece.size() > kInline) {
    heap_symbols.resize(piece.size());
    sym = heap_symbols.data();
  }
  int32_t n = 0;
  for (char ch : piece) {
    int32_t id = byte_token_[static_cast<uint8_t>(ch)];
    if (id < 0) {
      if (!unk_id_) continue;  // HF's BPE drops what it has no token for
      id = *unk_id_;
    }
    sym[n] = {id, n - 1, n + 1};
    ++n;
  }
  if (n == 0) return;
  sym[n - 1].next = -1;

  // Candidate merges, lowest rank first, then leftmost; entries whose pair has changed since
  // they were pushed are skipped when popped.
  struct Candidate {
    uint32_t rank;
    int32_t left;  // position of the left symbol
    int32_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(static_cast<size_t>(n));
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{},
                                                                               std::move(storage));
  const auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[left].next;
    if (right < 0) return;
    if (const uint64_t* v = find_merge(sym[left].id, sym[right].id)) {
      queue.push({static_cast<uint32_t>(*v >> 32), left, sym[left].id, sym[right].id,
                  static_cast<int32_t>(*v & 0xFFFFFFFFu)});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    if (l.id != c.left_id || l.next < 0 || sym[l.next].id != c.right_id) continue;  // stale
    Symbol& r = sym[l.next];
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.id = -1;
    push(l.prev);
    push(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

// Pieces repeat a lot in long texts ("the", " of"): within one encode() call each distinct piece
// is merged once. Per call, so that encode() stays const and thread-safe without locks.
struct Tokenizer::EncodeCache {
  struct Entry {
    uint32_t begin, size;  // into ids
  };
  std::unordered_map<std::string_view, Entry> pieces;  // views into the text being encoded
  std::vector<int32_t> ids;
};

void Tokenizer::encode_segment(std::string_view text, bool at_start, EncodeCache& cache,
                               std::vector<int32_t>& out) const {
  if (model_ == TokenizerModel::kSentencePiece) {
    if (text.empty()) return;
    spm_encode(
        spm_escape(text, add_space_prefix_ && at_start),
        [this](std::string_view piece) { return find_token(piece); },
        [this](int32_t id) { return scores_[id]; }, byte_token_, unk_id_, out);
    return;
  }
  for (const std::string_view piece : pre_tokenize(pre_, text)) {
    if (piece.size() == 1) {  // one byte: no merges to try
      const int32_t id = byte_token_[static_cast<uint8_t>(piece[0])];
      if (id >= 0) {
        out.push_back(id);
      } else if (unk_id_) {
        out.push_back(*unk_id_);
      }
      continue;
    }
    const auto [it, inserted] = cache.pieces.try_emplace(piece);
    if (inserted) {
      const size_t begin = cache.ids.size();
      bpe(piece, cache.ids);
      it->second = {static_cast<uint32_t>(begin), static_cast<uint32_t>(cache.ids.size() - begin)};
    }
    const int32_t* ids = cache.ids.data() + it->second.begin;
    out.insert(out.end(), ids, ids + it->second.size);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view utf8, bool add_special,
                                       bool parse_special) const {
  return encode_impl(utf8, add_special, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode_template(
    std::string_view utf8, bool add_special,
    std::span<const std::pair<size_t, size_t>> plain_ranges) const {
  return encode_impl(utf8, add_special, /*parse_special=*/true, plain_ranges);
}

std::vector<int32_t> Tokenizer::encode_impl(
    std::string_view utf8, bool add_special, bool parse_special,
    std::span<const std::pair<size_t, size_t>> plain_ranges) const {
  std::vector<int32_t> out;
  size_t next_range = 0;  // the first plain range that does not end before pos
  out.reserve(utf8.size() / 3 + 2);
  if (add_special && add_bos_) out.push_back(*bos_id_);
  EncodeCache cache;
  size_t segment = 0;  // start of the text not yet encoded
  for (size_t pos = 0; pos < utf8.size();) {
    const auto b = static_cast<uint8_t>(utf8[pos]);
    const SpecialToken* match = nullptr;
    while (next_range < plain_ranges.size() && plain_ranges[next_range].second <= pos) ++next_range;
    const bool in_plain = next_range < plain_ranges.size() && plain_ranges[next_range].first <= pos;
    // A special token may not reach into the next plain range either.
    const size_t limit = in_plain                           ? pos
                         : next_range < plain_ranges.size() ? plain_ranges[next_range].first
                                                            : utf8.size();
    const uint32_t candidates_end = in_plain ? special_begin_[b] : special_begin_[b + 1];
    for (uint32_t k = special_begin_[b]; k < candidates_end; ++k) {
      const SpecialToken& s = specials_[k];  // longest first
      if ((parse_special || !s.needs_parse_special) && pos + s.text.size() <= limit &&
          utf8.substr(pos).starts_with(s.text)) {
        match = &s;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    encode_segment(utf8.substr(segment, pos - segment), segment == 0, cache, out);
    out.push_back(match->id);
    pos += match->text.size();
    segment = pos;
  }
  encode_segment(utf8.substr(segment), segment == 0, cache, out);
  if (add_special && add_eos_) out.push_back(*eos_id_);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Decoding.

void Tokenizer::append_token_bytes(int32_t id, std::string& out) const {
  KVS_CHECK(id >= 0 && id < vocab_size());
  const std::string& text = tokens_[id];
  switch (types_[id]) {
    case TokenType::kNormal:
    case TokenType::kUndefined:
      if (model_ == TokenizerModel::kSentencePiece) {
        // "▁" stands for a space; everything else is the text itself.
        for (size_t pos = 0; pos < text.size();) {
          if (std::string_view(text).substr(pos).starts_with("\xE2\x96\x81")) {
            out += ' ';
            pos += 3;
          } else {
            out += text[pos++];
          }
        }
        return;
      }
      break;
    case TokenType::kByte:
      // "<0xAB>" is the byte 0xAB.
      if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
        unsigned value = 0;
        bool ok = true;
        for (char ch : std::string_view(text).substr(3, 2)) {
          const int digit = (ch >= '0' && ch <= '9')   ? ch - '0'
                            : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                            : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                                                       : -1;
          ok = ok && digit >= 0;
          value = value * 16 + static_cast<unsigned>(std::max(digit, 0));
        }
        if (ok) {
          out += static_cast<char>(value);
          return;
        }
      }
      break;
    default:  // control, user-defined, unknown, unused: the text as it is
      out += text;
      return;
  }
  // Byte-level characters back to bytes; a character outside the alphabet stands for itself.
  const ByteAlphabet& alphabet = byte_alphabet();
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Utf8Char c = unicode::decode_utf8(text, pos);
    if (c.status == unicode::Utf8Status::kValid && c.cp < alphabet.cp_to_byte.size() &&
        alphabet.cp_to_byte[c.cp] >= 0) {
      out += static_cast<char>(alphabet.cp_to_byte[c.cp]);
    } else {
      out.append(text, pos, c.len);
    }
    pos += c.len;
  }
}

std::string Tokenizer::token_bytes(int32_t id) const {
  std::string out;
  append_token_bytes(id, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    append_token_bytes(id, raw);
  }
  std::string out;
  out.reserve(raw.size());
  (void)unicode::append_sanitized_utf8(out, raw);
  return out;
}

}  // namespace kvs
