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
// render() gives the prompt as text; encode() gives its tokens with no special token matched
// inside message content (Tokenizer::encode_template), so content that spells a control token
// ("<|im_end|>") stays text and cannot forge a turn; only the scaffolding yields control tokens.
// For content without such strings the tokens are exactly those of the rendered text.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvs {

struct ChatMessage {
  std::string role, content;
};

// A run of rendered prompt text: the template's own scaffolding, or a message's content.
struct ChatPiece {
  std::string text;
  bool is_content = false;
};

class Tokenizer;

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
  // The same prompt as pieces; their concatenation is render()'s text.
  [[nodiscard]] std::vector<ChatPiece> render_pieces(std::span<const ChatMessage> messages,
                                                     bool add_generation_prompt) const;
  // The prompt's tokens: bos as the tokenizer adds it, scaffolding with control tokens parsed,
  // content as plain text (or with control tokens parsed too when trust_content).
  [[nodiscard]] std::vector<int32_t> encode(const Tokenizer& tokenizer,
                                            std::span<const ChatMessage> messages,
                                            bool add_generation_prompt,
                                            bool trust_content = false) const;

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
