#pragma once
// OpenAI tool calling: what a chat request asks for (`tools`, `tool_choice`,
// `parallel_tool_calls`) and the parsers that find tool calls in a model's output text.
//
// Models write tool calls in their family's format, which their chat template teaches them:
//   llama3_json  Llama 3.x: the whole output is `{"name": ..., "parameters": {...}}` (several
//                separated by ';'), optionally after `<|python_tag|>`;
//   hermes       Qwen2.5 / Qwen3 (and Hermes): `<tool_call>{"name": ..., "arguments": {...}}
//                </tool_call>` blocks anywhere in the output, any number;
//   mistral      Mistral: `[TOOL_CALLS]` followed by a JSON array of {"name", "arguments"}, or
//                (later Mistral tokenizers) `[TOOL_CALLS]name[ARGS]{...}` per call.
// A parser never fails: text that does not parse as a call (bad JSON, a missing name, a call
// over kMaxToolCallBytes) stays in the content exactly as generated.
//
// Thread-safety: ToolCallStreamParser is not thread-safe (one per choice); the rest is pure.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "strata/types/guided.h"

namespace strata::openai {

// Bounds on a request's tools (OpenAI's own: at most 128 tools, names of 1..64 bytes of
// [A-Za-z0-9_-]) and on what the parsers hold back from the output.
inline constexpr int kMaxTools = 128;
inline constexpr size_t kMaxToolNameBytes = 64;
inline constexpr size_t kMaxToolsJsonBytes = 1 << 20;  // the `tools` array, serialized
inline constexpr int kMaxToolCallsPerMessage = 128;    // an assistant message's tool_calls
// One call's text in the output (marker to end); a longer one stays content.
inline constexpr size_t kMaxToolCallBytes = 256 << 10;
// Calls parsed from one choice's output; later ones stay content.
inline constexpr int kMaxToolCallsPerOutput = 64;
// Nesting of a call's JSON (the arguments included).
inline constexpr int kMaxToolCallJsonDepth = 64;

enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

// The tool fields of a chat request, validated (see ParseChatRequest).
struct ToolsSpec {
  // [{"type": "function", "function": {"name", "description"?, "parameters"?, ...}}] exactly
  // as the client sent them (key order kept): the chat template's `tools`.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  // kAuto when tools are given and tool_choice is not; kNone without tools.
  ToolChoice choice = ToolChoice::kNone;
  std::string function_name;  // kFunction: the function tool_choice names
  bool parallel_tool_calls = true;

  // Whether the template gets the tools and the output is parsed for calls: tools given and
  // tool_choice is not "none" (which renders the prompt without tools, as vLLM does).
  bool active() const { return !tools.empty() && choice != ToolChoice::kNone; }
};

// Which output format to parse. kAuto picks one from the model's chat template
// (DetectToolCallParser); kNone parses nothing.
enum class ToolCallParser { kAuto, kNone, kLlama3Json, kHermes, kMistral };

// The output constraint of tool_choice "required" or a named function: one or more calls (up
// to 4 with parallel_tool_calls, else 1) in `parser`'s syntax, each of a function tool_choice
// allows, its arguments following that function's `parameters` schema. Compiled once here so a
// schema the grammar cannot take is refused (InvalidArgument naming why); when 4 calls'
// automaton would be too large, 2, then 1.
absl::StatusOr<GuidedDecoding> ToolCallConstraint(const ToolsSpec& tools, ToolCallParser parser);

// "auto", "none", "llama3_json", "hermes", "mistral"; InvalidArgument otherwise.
absl::Status ParseToolCallParser(std::string_view name, ToolCallParser* out);
std::string_view ToolCallParserName(ToolCallParser parser);
// The format a chat template writes tool calls in, judged by the markers it contains:
// `<tool_call>` hermes, `[TOOL_CALLS]` mistral, `<|python_tag|>` or Llama 3 headers with tools
// llama3_json; kNone when none of them.
ToolCallParser DetectToolCallParser(std::string_view chat_template_source);

struct ToolCall {
  std::string id;  // empty from the parsers; the front end assigns NewToolCallId()
  std::string name;
  std::string arguments;  // JSON text (an object as the model wrote it, compacted)
};

// A fresh random id: "call_" + 24 alphanumerics; for kMistral 9 alphanumerics, the only form
// Mistral's chat templates accept when the call is sent back.
std::string NewToolCallId(ToolCallParser parser);

struct ToolCallOutput {
  std::string content;  // the text outside the calls
  std::vector<ToolCall> calls;
};

// Finds tool calls in text as it is generated. Feed() returns the content that is known not
// to belong to a call and the calls completed so far; text that may start a call (a prefix of
// a marker, a call without its end yet) is held back until it is known. Whitespace between
// calls, and whitespace alone before the first call, is dropped (a run of it over
// kMaxToolCallBytes is content); everything else not in a parsed call is content. What is held
// back stays under 2 * kMaxToolCallBytes plus a marker. Any split of the same text into Feed()
// calls followed by Finish() gives the same content (concatenated) and calls.
class ToolCallStreamParser {
 public:
  // `parser` must be concrete (not kAuto); kNone passes every byte through as content.
  explicit ToolCallStreamParser(ToolCallParser parser);

  ToolCallOutput Feed(std::string_view text);
  // The end of the output: what is held back is resolved (a call, or content).
  ToolCallOutput Finish();

 private:
  enum class Mode { kText, kCall, kTextOnly };
  void Process(bool final, ToolCallOutput* out);
  void ProcessText(bool final, ToolCallOutput* out);
  void ProcessCall(bool final, ToolCallOutput* out);
  // Llama 3: a call can start only at the beginning of the output.
  void ProcessLlamaStart(bool final, ToolCallOutput* out);
  void EmitContent(std::string_view text, ToolCallOutput* out);
  // The first `consumed` bytes of buf_ (after call_open_) were not a call: back to content.
  // Over the size bound, nothing after them is parsed any more either.
  void FailCall(size_t consumed, bool over_limit, ToolCallOutput* out);

  ToolCallParser parser_;
  Mode mode_ = Mode::kText;
  std::string buf_;               // text not yet decided
  std::string ws_;                // whitespace held at the start or after a call
  std::string call_open_;         // kCall: the held whitespace and marker that opened the call
  size_t searched_ = 0;           // kCall: buf_ holds no end marker before this offset
  bool at_segment_start_ = true;  // no content since the start or the last call
  bool started_ = false;          // Llama 3: the start of the output was decided
  int calls_ = 0;
};

// The whole output at once (one Feed and Finish).
ToolCallOutput ParseToolCalls(ToolCallParser parser, std::string_view text);

}  // namespace strata::openai
