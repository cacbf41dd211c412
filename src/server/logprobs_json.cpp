#include "server/logprobs_json.h"

#include <cstdio>

#include "model/unicode.h"

namespace kvs {

using nlohmann::json;

TokenLogprobText token_logprob_text(const Tokenizer& tokenizer, const SampledLogprobs& lp,
                                    uint32_t text_offset) {
  TokenLogprobText t{.bytes = tokenizer.token_bytes(lp.sampled.token),
                     .logprob = lp.sampled.logprob,
                     .text_offset = text_offset,
                     .top = {}};
  t.top.reserve(lp.top.size());
  for (const TokenLogprob& x : lp.top)
    t.top.emplace_back(tokenizer.token_bytes(x.token), x.logprob);
  return t;
}

std::string token_display(const std::string& bytes) {
  bool valid = true;
  for (size_t pos = 0; pos < bytes.size() && valid;) {
    const unicode::Utf8Char c = unicode::decode_utf8(bytes, pos);
    valid = c.status == unicode::Utf8Status::kValid;
    pos += c.len;
  }
  if (valid) return bytes;
  std::string out = "bytes:";
  for (const char ch : bytes) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(ch));
    out += hex;
  }
  return out;
}

namespace {
json byte_values(const std::string& bytes) {
  json out = json::array();
  for (const char ch : bytes) out.push_back(static_cast<unsigned char>(ch));
  return out;
}
}  // namespace

json chat_logprobs_json(std::span<const TokenLogprobText> tokens) {
  json content = json::array();
  for (const TokenLogprobText& t : tokens) {
    json top = json::array();
    for (const auto& [bytes, logprob] : t.top)
      top.push_back(
          {{"token", token_display(bytes)}, {"logprob", logprob}, {"bytes", byte_values(bytes)}});
    content.push_back({{"token", token_display(t.bytes)},
                       {"logprob", t.logprob},
                       {"bytes", byte_values(t.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs_json(std::span<const TokenLogprobText> tokens) {
  json shown = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprobText& t : tokens) {
    const std::string token = token_display(t.bytes);
    json top = json::object();
    for (const auto& [bytes, logprob] : t.top) {
      const std::string key = token_display(bytes);
      if (!top.contains(key)) top[key] = logprob;
    }
    if (!top.contains(token)) top[token] = t.logprob;
    shown.push_back(token);
    logprobs.push_back(t.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(t.text_offset);
  }
  return {{"tokens", std::move(shown)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace kvs
