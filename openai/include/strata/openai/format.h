#pragma once
// OpenAI response bodies: completion and chat objects, streaming chunks, usage, logprobs,
// errors and SSE framing. Everything is nlohmann::ordered_json so key order is stable (and
// matches OpenAI's own order), which clients and golden tests rely on.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "strata/openai/protocol.h"
#include "strata/openai/tool_calls.h"
#include "strata/text/tokenizer.h"
#include "strata/types/finish_reason.h"
#include "strata/types/sampling.h"

namespace strata::openai {

using OrderedJson = nlohmann::ordered_json;

struct ResponseMeta {
  std::string id;       // "cmpl-…" or "chatcmpl-…"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from a prefix cache
};

// One finished choice of a non-streaming response.
struct ChoiceOutput {
  int index = 0;
  std::string text;
  std::vector<SampleResult> logprobs;  // one per generated token when requested
  FinishReason finish_reason = FinishReason::kNone;
  // Chat: the tool calls parsed from the output. When there are any, `text` is the content
  // outside them (null in JSON when empty) and finish_reason is "tool_calls".
  std::vector<ToolCall> tool_calls;
};

// "stop" / "length"; null for kNone (and for kAbort, which clients never see).
OrderedJson FinishReasonJson(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":{"cached_tokens"}}
OrderedJson UsageJson(const Usage& usage);

// Completions logprobs: {"tokens", "token_logprobs", "top_logprobs":[{tok: lp}], "text_offset"}.
// `text_offset` is the running offset in the choice's text (updated; starts at 0 per choice).
OrderedJson CompletionLogprobsJson(const Tokenizer& tokenizer,
                                   std::span<const SampleResult> logprobs, int64_t* text_offset);
// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs":[{...}]}]}.
OrderedJson ChatLogprobsJson(const Tokenizer& tokenizer, std::span<const SampleResult> logprobs);

// Complete responses; choices must be ordered by index. `logprobs` says whether they were
// requested (null otherwise).
OrderedJson CompletionResponseJson(const ResponseMeta& meta,
                                   const std::vector<ChoiceOutput>& choices, const Usage& usage,
                                   const Tokenizer& tokenizer, bool logprobs);
OrderedJson ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                             const Usage& usage, const Tokenizer& tokenizer, bool logprobs);

// [{"id", "type": "function", "function": {"name", "arguments"}}]; with first_index >= 0 each
// entry starts with "index": first_index + i (the form of a streamed delta.tool_calls).
OrderedJson ToolCallsJson(std::span<const ToolCall> calls, int first_index = -1);

// Streaming chunks with one choice each. `logprobs` is null or a *LogprobsJson value;
// `include_usage` adds "usage": null (stream_options.include_usage).
OrderedJson CompletionChunkJson(const ResponseMeta& meta, int index, std::string_view text,
                                OrderedJson logprobs, FinishReason finish_reason,
                                bool include_usage);
// `delta` is e.g. {"role":"assistant","content":""}, {"content":"…"} or {}.
OrderedJson ChatChunkJson(const ResponseMeta& meta, int index, OrderedJson delta,
                          OrderedJson logprobs, FinishReason finish_reason, bool include_usage);
// The same with finish_reason given as JSON (e.g. "tool_calls").
OrderedJson ChatChunkJsonWithFinish(const ResponseMeta& meta, int index, OrderedJson delta,
                                    OrderedJson logprobs, OrderedJson finish_reason,
                                    bool include_usage);
// The last chunk with stream_options.include_usage: "choices": [] and the usage.
// `object` is "text_completion" or "chat.completion.chunk".
OrderedJson UsageChunkJson(const ResponseMeta& meta, std::string_view object, const Usage& usage);

// {"error": {"message", "type", "param", "code"}}; empty param/code are null.
OrderedJson ErrorJson(const ApiError& error);

// Serializes without ever throwing: invalid UTF-8 in strings is replaced by U+FFFD.
std::string DumpJson(const OrderedJson& json);

// Server-Sent Events framing: "data: <json>\n\n", and the terminator.
std::string SseData(const OrderedJson& json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace strata::openai
