#include "model/sentencepiece_bpe.h"

#include <queue>

#include "model/unicode.h"

namespace kvs {

namespace {
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
}  // namespace

std::string spm_escape(std::string_view text, bool add_space_prefix) {
  std::string out;
  out.reserve(text.size() + 8);
  if (add_space_prefix) out += kSpace;
  for (char c : text) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out += c;
    }
  }
  return out;
}

void spm_encode(std::string_view text,
                const std::function<std::optional<int32_t>(std::string_view)>& find_token,
                const std::function<float(int32_t)>& score, const int32_t* byte_token,
                std::optional<int32_t> unk_id, std::vector<int32_t>& out) {
  if (text.empty()) return;
  // Pieces: contiguous ranges of the text, as a doubly linked list (len 0 = merged away).
  struct Piece {
    uint32_t start, len;
    int32_t prev, next;
  };
  std::vector<Piece> p;
  p.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Utf8Char c = unicode::decode_utf8(text, pos);
    const int32_t i = static_cast<int32_t>(p.size());
    p.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(c.len), i - 1, i + 1});
    pos += c.len;
  }
  p.back().next = -1;
  struct Pair {
    float score;
    int32_t left, right;
    uint32_t len;  // the merged piece's length when pushed (stale entries no longer match)
    bool operator<(const Pair& o) const {
      return score != o.score ? score < o.score : left > o.left;  // max-heap: best first
    }
  };
  std::priority_queue<Pair> queue;
  const auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = p[left].len + p[right].len;
    if (const auto id = find_token(text.substr(p[left].start, len)))
      queue.push({score(*id), left, right, len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(p.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const Pair best = queue.top();
    queue.pop();
    Piece& l = p[best.left];
    Piece& r = p[best.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != best.len || l.next != best.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) p[r.next].prev = best.left;
    try_pair(l.prev, best.left);
    try_pair(best.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = p[i].next) {
    const std::string_view piece = text.substr(p[i].start, p[i].len);
    if (const auto id = find_token(piece)) {
      out.push_back(*id);
      continue;
    }
    // Only single characters can be missing (a merge needs its result to be a token).
    for (char ch : piece) {
      const int32_t b = byte_token[static_cast<uint8_t>(ch)];
      if (b >= 0) {
        out.push_back(b);
      } else if (unk_id) {
        out.push_back(*unk_id);
        break;
      }
    }
  }
}

}  // namespace kvs
