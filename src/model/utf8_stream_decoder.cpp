#include "model/utf8_stream_decoder.h"

#include "model/unicode.h"

namespace kvs {

std::string Utf8StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  const size_t keep = unicode::append_sanitized_utf8(out, pending_, /*keep_truncated_tail=*/true);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out;
  (void)unicode::append_sanitized_utf8(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace kvs
