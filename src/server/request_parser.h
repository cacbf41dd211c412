// RequestParser: turns an OpenAI-style JSON body (POST /v1/completions or /v1/chat/completions)
// into a validated GenerationRequest, or an ApiError saying which field is wrong.
//
// Every field is type-checked before it is read (a wrongly typed or nested value is a 400,
// never an exception), integers must fit exactly (no wrap-around, no float-to-int overflow), and
// the prompt is bounded before it is tokenized: text longer than max_prompt_bytes cannot fit in
// max_model_len tokens (no token stands for more than Tokenizer::max_token_bytes() bytes), so it
// is refused without the work of tokenizing it.
//
// Chat messages: only the roles system, developer (rendered as system), user, assistant and
// tool are accepted. Message text is tokenized as plain text, so a user who writes
// "<|im_end|>" gets those characters, not the control token, and cannot forge turns; only the
// chat template's own scaffolding produces control tokens (ChatTemplate::encode).
// trust_message_special_tokens restores the old behaviour (control tokens parsed in content).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "server/engine_worker.h"

namespace kvs {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

struct ParsedRequest {
  GenerationRequest gen;
  bool stream = false;
  bool include_usage = false;
  bool chat = false;
  // Top-level fields kvserve does not know (request_fields.h): accepted, for the server to log.
  std::vector<std::string> unknown_fields;
};

struct RequestLimits {
  std::string served_model_name;
  uint64_t max_model_len = 0;  // prompt + output tokens
  uint64_t pool_tokens = 0;    // token slots of the whole KV pool
  uint64_t max_prompt_bytes = 0;
  bool trust_message_special_tokens = false;
  // The most top alternatives a request may ask for per token (logprobs / top_logprobs); vLLM's
  // --max-logprobs, with its default.
  uint32_t max_logprobs = 20;
};

class RequestParser {
 public:
  // chat_template may be null (the model has none: chat requests get a 400).
  RequestParser(const Tokenizer& tokenizer, const ChatTemplate* chat_template, RequestLimits limits)
      : tokenizer_(tokenizer), chat_template_(chat_template), limits_(std::move(limits)) {}

  // Parses and validates `body` (any JSON value). On success *out holds the request (its
  // cache_salt is the client's field; the caller adds the tenant).
  [[nodiscard]] std::optional<ApiError> parse(const nlohmann::json& body, bool chat,
                                              ParsedRequest* out) const;

  [[nodiscard]] const RequestLimits& limits() const { return limits_; }

 private:
  [[nodiscard]] std::optional<ApiError> parse_prompt(const nlohmann::json& body, bool chat,
                                                     GenerationRequest* g) const;

  const Tokenizer& tokenizer_;
  const ChatTemplate* chat_template_;
  RequestLimits limits_;
};

}  // namespace kvs
