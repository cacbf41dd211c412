// Logprobs as the OpenAI API shows them. The engine reports token ids (engine/token_logprobs.h);
// the engine worker turns each into a TokenLogprobText (bytes, offset) and the routes put them in
// their bodies:
//   chat:        "logprobs": {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}],
//                             "refusal": null}
//   completions: "logprobs": {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
//                             "text_offset"}
// Every sampled token has an entry, the one that ends the sample (end of generation, or the
// token that completed a stop string) included, so there are as many entries as
// completion_tokens. A token whose bytes are not well-formed UTF-8 on their own (part of a
// character) is shown as "bytes:\xe2\x80" (as vLLM does); chat's "bytes" carries the exact bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/token_logprobs.h"
#include "model/tokenizer.h"

namespace kvs {

struct TokenLogprobText {
  std::string bytes;  // the token's raw bytes (special tokens: their text)
  float logprob = 0.0f;
  uint32_t text_offset = 0;  // characters of the choice's text before this token
  std::vector<std::pair<std::string, float>> top;  // bytes and logprob, most likely first
};

[[nodiscard]] TokenLogprobText token_logprob_text(const Tokenizer& tokenizer,
                                                  const SampledLogprobs& logprobs,
                                                  uint32_t text_offset);

// The token as a JSON string: its bytes when well-formed UTF-8, else "bytes:" and \xNN escapes.
[[nodiscard]] std::string token_display(const std::string& bytes);

// {"content": [...], "refusal": null}
[[nodiscard]] nlohmann::json chat_logprobs_json(std::span<const TokenLogprobText> tokens);
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; each top_logprobs object holds
// the top alternatives and the sampled token (up to logprobs + 1 keys, as OpenAI's).
[[nodiscard]] nlohmann::json completion_logprobs_json(std::span<const TokenLogprobText> tokens);

}  // namespace kvs
