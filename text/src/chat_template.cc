#include "strata/text/chat_template.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chat_template_ast.h"
#include "chat_template_interp.h"
#include "chat_template_value.h"
#include "strata/common/file_util.h"
#include "strata/common/status_macros.h"

namespace strata {

struct ChatTemplate::Parsed {
  std::vector<jinja::Node> nodes;
};

namespace {

// A special token in tokenizer_config.json: a string or a serialized AddedToken.
std::string TokenText(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

absl::StatusOr<std::string> PickTemplate(const nlohmann::json& value, std::string_view name,
                                         const std::string& path) {
  if (value.is_string()) return value.get<std::string>();
  std::string wanted = name.empty() ? "default" : std::string(name);
  if (value.is_array()) {
    for (const auto& entry : value) {
      if (entry.is_object() && entry.value("name", "") == wanted && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return absl::NotFoundError(absl::StrCat(path, ": no chat template named '", wanted, "'"));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template must be a string or list"));
}

// transformers copies reasoning under `thinking` and `reasoning_content` before rendering:
// {"thinking": r, **message, "reasoning_content": r}.
void AliasReasoningFields(jinja::Value* message) {
  if (message->kind != jinja::Value::Kind::kDict) return;
  const jinja::Value* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const jinja::Value* v = jinja::DictFind(*message->dict, key);
    if (v != nullptr && v->kind != jinja::Value::Kind::kNone) {
      reasoning = v;
      break;
    }
  }
  if (reasoning == nullptr) return;
  jinja::Value r = *reasoning;
  jinja::Dict aliased;
  const jinja::Value* thinking = jinja::DictFind(*message->dict, "thinking");
  aliased.emplace_back("thinking", thinking != nullptr ? *thinking : r);
  for (const auto& [k, v] : *message->dict) {
    if (k != "thinking") aliased.emplace_back(k, k == "reasoning_content" ? r : v);
  }
  if (jinja::DictFind(aliased, "reasoning_content") == nullptr) {
    aliased.emplace_back("reasoning_content", r);
  }
  *message = jinja::Value::MakeDict(std::move(aliased));
}

// Jinja's lexer first turns \r\n and \r into \n and, with keep_trailing_newline off (HF
// leaves it off), drops one newline at the very end of the template.
std::string NormalizeNewlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos, std::string eos,
                           std::unique_ptr<const Parsed> parsed)
    : source_(std::move(source)),
      bos_token_(std::move(bos)),
      eos_token_(std::move(eos)),
      parsed_(std::move(parsed)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<ChatTemplate> ChatTemplate::FromString(std::string source, std::string bos_token,
                                                      std::string eos_token) {
  source = NormalizeNewlines(source);
  STRATA_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::Lex(source));
  auto parsed = std::make_unique<Parsed>();
  STRATA_ASSIGN_OR_RETURN(parsed->nodes, jinja::Parse(source, std::move(tokens)));
  return ChatTemplate(std::move(source), std::move(bos_token), std::move(eos_token),
                      std::move(parsed));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromModelDir(const std::string& dir,
                                                        std::string_view template_name) {
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (std::filesystem::path(dir) / "chat_template.jinja").string();
  nlohmann::json config = nlohmann::json::object();
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
    config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(config_path, ": not a JSON object"));
    }
  }
  std::string source;
  if (std::filesystem::exists(jinja_path, ec)) {
    STRATA_ASSIGN_OR_RETURN(source, ReadFileToString(jinja_path));
  } else if (config.contains("chat_template")) {
    STRATA_ASSIGN_OR_RETURN(source,
                            PickTemplate(config["chat_template"], template_name, config_path));
  } else {
    return absl::NotFoundError(absl::StrCat(dir, ": the model has no chat template"));
  }
  return FromString(std::move(source), TokenText(config, "bos_token"),
                    TokenText(config, "eos_token"));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const nlohmann::ordered_json& extra_context) const {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be a JSON array");
  if (!extra_context.is_object() && !extra_context.is_null()) {
    return absl::InvalidArgumentError("extra_context must be a JSON object");
  }
  jinja::Value msgs = jinja::FromJson(messages);
  for (jinja::Value& m : *msgs.list) AliasReasoningFields(&m);
  jinja::Dict globals = {
      {"bos_token", jinja::Value::Str(bos_token_)},
      {"eos_token", jinja::Value::Str(eos_token_)},
      {"messages", std::move(msgs)},
      {"tools", jinja::Value::None()},
      {"documents", jinja::Value::None()},
      {"add_generation_prompt", jinja::Value::Bool(add_generation_prompt)},
  };
  if (extra_context.is_object()) {
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it) {
      jinja::Value v = jinja::FromJson(it.value());
      jinja::Value* slot = jinja::DictFindMutable(globals, it.key());
      if (slot != nullptr) {
        *slot = std::move(v);
      } else {
        globals.emplace_back(it.key(), std::move(v));
      }
    }
  }
  jinja::Interpreter interpreter(source_, std::move(globals));
  return interpreter.Render(parsed_->nodes);
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& messages,
                                                 bool add_generation_prompt,
                                                 const nlohmann::json& extra_context) const {
  auto convert = [](const nlohmann::json& j) {
    return nlohmann::ordered_json::parse(
        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), nullptr, false);
  };
  return Render(convert(messages), add_generation_prompt, convert(extra_context));
}

}  // namespace strata
