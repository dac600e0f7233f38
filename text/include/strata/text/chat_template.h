#pragma once
// Chat templates: renders an OpenAI-style message list into the prompt string exactly as
// Hugging Face `tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...)` does, with a small Jinja2 interpreter (the subset real chat
// templates use: Llama 3.x, Qwen2.5, Qwen3, Mistral/Mixtral instruct and similar).
//
// Semantics follow HF's Jinja environment: trim_blocks and lstrip_blocks on, default Undefined
// (an undefined variable renders empty and is falsy; an attribute of one is an error),
// `raise_exception(msg)`, `strftime_now(fmt)`, `namespace(...)`, and `tojson` as
// json.dumps(ensure_ascii=False). Template values: `messages`, `add_generation_prompt`,
// `bos_token`, `eos_token`, `tools` and `documents` (None unless given), then every key of
// `extra_context` (e.g. tools, enable_thinking, date_string), which overrides the others.
//
// Thread-safety: a ChatTemplate is immutable after construction; Render may be called from
// many threads at once.
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata {

class ChatTemplate {
 public:
  // Reads <dir>/chat_template.jinja if present, else `chat_template` in
  // <dir>/tokenizer_config.json (a string, or a list of {"name", "template"} from which
  // `template_name` is picked; "default" when empty). bos/eos tokens come from
  // tokenizer_config.json (string or {"content": ...}). NotFound when the model has no
  // template; InvalidArgument when it does not parse.
  static absl::StatusOr<ChatTemplate> FromModelDir(const std::string& dir,
                                                   std::string_view template_name = "");
  // Parses `source` (newlines normalized to \n and one trailing newline dropped, as Jinja
  // does). InvalidArgument "chat template line L column C: ..." on syntax errors.
  static absl::StatusOr<ChatTemplate> FromString(std::string source, std::string bos_token,
                                                 std::string eos_token);

  // Renders `messages` (a JSON array of message objects). Object key order is kept for the
  // ordered_json overload (it matters to `tojson`); nlohmann::json sorts keys. Errors are
  // InvalidArgument: the message given to raise_exception() verbatim, or a runtime error with
  // the template position.
  [[nodiscard]] absl::StatusOr<std::string> Render(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object()) const;
  [[nodiscard]] absl::StatusOr<std::string> Render(
      const nlohmann::json& messages, bool add_generation_prompt,
      const nlohmann::json& extra_context = nlohmann::json::object()) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Parsed;
  ChatTemplate(std::string source, std::string bos, std::string eos,
               std::unique_ptr<const Parsed> parsed);

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::unique_ptr<const Parsed> parsed_;
};

}  // namespace strata
