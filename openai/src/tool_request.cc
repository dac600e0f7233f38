#include "src/tool_request.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "strata/common/json_limits.h"

namespace strata::openai::internal {
namespace {

using Json = nlohmann::ordered_json;

ApiError Invalid(const std::string& param, std::string_view what) {
  return ApiError::BadRequest(absl::StrCat("Invalid '", param, "': ", std::string(what)), param);
}

// OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$.
bool ValidName(const std::string& name) {
  return !name.empty() && name.size() <= kMaxToolNameBytes &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
         });
}

std::optional<ApiError> CheckFunction(const Json& function, const std::string& path,
                                      std::string* name) {
  if (!function.is_object()) return Invalid(path, "expected an object");
  auto n = function.find("name");
  if (n == function.end() || n->is_null()) {
    return ApiError::BadRequest(absl::StrCat("Missing required parameter: '", path, ".name'."),
                                path + ".name");
  }
  if (!n->is_string()) return Invalid(path + ".name", "expected a string");
  *name = n->get<std::string>();
  if (!ValidName(*name)) {
    return Invalid(path + ".name",
                   "a function name must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-'");
  }
  auto description = function.find("description");
  if (description != function.end() && !description->is_null() && !description->is_string()) {
    return Invalid(path + ".description", "expected a string");
  }
  auto parameters = function.find("parameters");
  if (parameters != function.end() && !parameters->is_null() && !parameters->is_object()) {
    return Invalid(path + ".parameters", "expected an object (a JSON Schema)");
  }
  auto strict = function.find("strict");
  if (strict != function.end() && !strict->is_null() && !strict->is_boolean()) {
    return Invalid(path + ".strict", "expected a boolean");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseTools(const Json& tools, ToolsSpec* out,
                                   std::vector<std::string>* names) {
  if (!tools.is_array()) return Invalid("tools", "expected an array of tools");
  if (tools.size() > kMaxTools) {
    return Invalid("tools", absl::StrCat("at most ", kMaxTools, " tools, got ", tools.size()));
  }
  if (tools.dump(-1, ' ', false, Json::error_handler_t::replace).size() > kMaxToolsJsonBytes) {
    return Invalid("tools",
                   absl::StrCat("the tools take more than ", kMaxToolsJsonBytes, " bytes of JSON"));
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string path = absl::StrCat("tools[", i, "]");
    if (!tool.is_object()) return Invalid(path, "expected an object");
    auto type = tool.find("type");
    if (type == tool.end() || !type->is_string() || *type != "function") {
      return Invalid(path + ".type", "only tools of type \"function\" are supported");
    }
    auto function = tool.find("function");
    if (function == tool.end() || function->is_null()) {
      return ApiError::BadRequest(
          absl::StrCat("Missing required parameter: '", path, ".function'."), path + ".function");
    }
    std::string name;
    if (auto e = CheckFunction(*function, path + ".function", &name)) return e;
    if (std::find(names->begin(), names->end(), name) != names->end()) {
      return Invalid(path + ".function.name",
                     absl::StrCat("the function name '", name, "' is used by another tool"));
    }
    names->push_back(std::move(name));
  }
  out->tools = tools;
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const Json& choice, const std::vector<std::string>& names,
                                        ToolsSpec* out) {
  if (choice.is_string()) {
    const std::string& c = choice.get_ref<const std::string&>();
    if (c == "auto") {
      out->choice = ToolChoice::kAuto;
    } else if (c == "none") {
      out->choice = ToolChoice::kNone;
    } else if (c == "required") {
      out->choice = ToolChoice::kRequired;
    } else {
      return Invalid("tool_choice",
                     "expected \"none\", \"auto\", \"required\" or an object "
                     "naming a function");
    }
  } else if (choice.is_object()) {
    auto type = choice.find("type");
    if (type == choice.end() || !type->is_string() || *type != "function") {
      return Invalid("tool_choice.type", "expected \"function\"");
    }
    auto function = choice.find("function");
    const Json* name = nullptr;
    if (function != choice.end() && function->is_object()) {
      auto it = function->find("name");
      if (it != function->end() && it->is_string()) name = &*it;
    }
    if (name == nullptr) {
      return Invalid("tool_choice.function.name", "expected the name of a function in tools");
    }
    out->choice = ToolChoice::kFunction;
    out->function_name = name->get<std::string>();
    if (std::find(names.begin(), names.end(), out->function_name) == names.end()) {
      return Invalid(
          "tool_choice.function.name",
          absl::StrCat("no function named '", out->function_name.substr(0, 64), "' in tools"));
    }
  } else {
    return Invalid("tool_choice", "expected a string or an object");
  }
  if (out->choice != ToolChoice::kNone && names.empty()) {
    return ApiError::BadRequest(
        "tool_choice is only allowed when tools are specified (or when it is \"none\")",
        "tool_choice");
  }
  return std::nullopt;
}

std::optional<ApiError> NormalizeToolCall(Json* call, const std::string& path) {
  if (!call->is_object()) return Invalid(path, "expected an object");
  auto id = call->find("id");
  if (id != call->end() && !id->is_null() && !id->is_string()) {
    return Invalid(path + ".id", "expected a string");
  }
  auto type = call->find("type");
  if (type != call->end() && !type->is_null() && *type != "function") {
    return Invalid(path + ".type", "only \"function\" tool calls are supported");
  }
  auto function = call->find("function");
  if (function == call->end() || !function->is_object()) {
    return Invalid(path + ".function", "expected an object with name and arguments");
  }
  auto name = function->find("name");
  if (name == function->end() || !name->is_string()) {
    return Invalid(path + ".function.name", "expected a string");
  }
  auto arguments = function->find("arguments");
  if (arguments != function->end() && arguments->is_string()) {
    // The body's depth was bounded before parsing; the string's own JSON is bounded the same.
    const std::string& text = arguments->get_ref<const std::string&>();
    if (CheckJsonDepth(text).ok()) {
      Json parsed = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) *arguments = std::move(parsed);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseToolFields(const Json& body, ToolsSpec* out) {
  std::vector<std::string> names;
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (auto e = ParseTools(*tools, out, &names)) return e;
  }
  out->choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  auto choice = body.find("tool_choice");
  if (choice != body.end() && !choice->is_null()) {
    if (auto e = ParseToolChoice(*choice, names, out)) return e;
  }
  auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) return Invalid("parallel_tool_calls", "expected a boolean");
    out->parallel_tool_calls = parallel->get<bool>();
  }
  return std::nullopt;
}

std::optional<ApiError> NormalizeToolMessage(Json* message, size_t index) {
  const std::string path = absl::StrCat("messages[", index, "]");
  auto calls = message->find("tool_calls");
  if (calls != message->end()) {
    if (calls->is_null()) {
      // As HF drops None-valued keys: templates test for the key, not for null.
      message->erase(calls);
    } else {
      if ((*message)["role"] != "assistant") {
        return Invalid(path + ".tool_calls", "only assistant messages carry tool calls");
      }
      if (!calls->is_array()) return Invalid(path + ".tool_calls", "expected an array");
      if (calls->size() > kMaxToolCallsPerMessage) {
        return Invalid(path + ".tool_calls",
                       absl::StrCat("at most ", kMaxToolCallsPerMessage, " tool calls"));
      }
      for (size_t i = 0; i < calls->size(); ++i) {
        if (auto e = NormalizeToolCall(&(*calls)[i], absl::StrCat(path, ".tool_calls[", i, "]"))) {
          return e;
        }
      }
    }
  }
  auto id = message->find("tool_call_id");
  if (id != message->end() && !id->is_null() && !id->is_string()) {
    return Invalid(path + ".tool_call_id", "expected a string");
  }
  return std::nullopt;
}

}  // namespace strata::openai::internal
