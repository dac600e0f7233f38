#pragma once
// The tool-calling fields of a chat request: `tools`, `tool_choice`, `parallel_tool_calls`, and
// the messages that carry earlier calls and their results. Internal to strata::openai (used by
// the request parsers in protocol.cc).
#include <cstddef>
#include <optional>

#include "nlohmann/json.hpp"
#include "strata/openai/protocol.h"
#include "strata/openai/tool_calls.h"

namespace strata::openai::internal {

// Reads and checks tools (function tools only, at most kMaxTools, unique names of 1..64 bytes
// of [A-Za-z0-9_-], a description string and a parameters object when given, the array at
// most kMaxToolsJsonBytes serialized), tool_choice ("auto", "none", "required" or
// {"type": "function", "function": {"name"}} naming one of the tools; anything but "none"
// needs tools) and parallel_tool_calls (a boolean). nullopt on success.
std::optional<ApiError> ParseToolFields(const nlohmann::ordered_json& body, ToolsSpec* out);

// Checks the tool-calling keys of message `index` and brings them to the shape chat templates
// read: an assistant's `tool_calls` (null: removed) is an array of at most
// kMaxToolCallsPerMessage {"id"?, "type": "function", "function": {"name", "arguments"}}, and
// an `arguments` string holding a JSON object becomes that object (templates, and HF's
// documentation of them, take the arguments as a mapping; vLLM converts them the same way);
// a tool message's `tool_call_id`, when given, is a string.
std::optional<ApiError> NormalizeToolMessage(nlohmann::ordered_json* message, size_t index);

}  // namespace strata::openai::internal
