// ChatTemplate: turns a conversation into the prompt text a chat model was trained on.
//
// kvserve does not run Jinja. It recognizes the family of a GGUF `tokenizer.chat_template` and
// renders that family's format in C++:
//   kChatMl  (the template mentions "<|im_start|>": SmolLM, Qwen, ...)
//              <|im_start|>{role}\n{content}<|im_end|>\n ...  generation prompt
//              <|im_start|>assistant\n
//            When the template carries a default system message (SmolLM2: "{% if loop.first and
//            messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are ...<|im_end|>\n'
//            }}"), it is read from the template text and inserted before a conversation that
//            does not start with a system message, as the Jinja template does.
//   kLlama3  (the template mentions "<|start_header_id|>")
//              <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|> ...
//              generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n
//            The leading <|begin_of_text|> is left to the tokenizer's add_bos (as llama.cpp
//            does), so it is not doubled.
//   kPlain   (any other template): "{role}: {content}\n" per message, generation prompt
//            "assistant:".
// Message text is inserted verbatim: encode the prompt with parse_special only when the content
// is trusted not to spell control tokens.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace kvs {

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  enum class Kind { kChatMl, kLlama3, kPlain };

  // Recognizes the family of a GGUF tokenizer.chat_template (see above). Fails with
  // invalid_argument only for an empty template (the model has no chat format); an unrecognized
  // one falls back to kPlain.
  static Result<ChatTemplate> from_template_string(std::string_view jinja);
  // A template of a known family without Jinja text (default_system_message unset).
  static ChatTemplate of_kind(Kind kind) { return ChatTemplate(kind, std::nullopt); }

  [[nodiscard]] std::string render(std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) const;

  [[nodiscard]] Kind kind() const { return kind_; }
  // The system message inserted before a conversation that does not start with one, if any.
  [[nodiscard]] const std::optional<std::string>& default_system_message() const {
    return default_system_;
  }

 private:
  ChatTemplate(Kind kind, std::optional<std::string> default_system)
      : kind_(kind), default_system_(std::move(default_system)) {}

  Kind kind_;
  std::optional<std::string> default_system_;
};

}  // namespace kvs
