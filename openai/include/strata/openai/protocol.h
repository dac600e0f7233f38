#pragma once
// OpenAI request bodies: parsing and validation of POST /v1/completions and
// POST /v1/chat/completions into plain structs, and the OpenAI error shape.
//
// Parsing is pure (no tokenizer, no served-model list): it checks JSON syntax, types and ranges
// of every known field; a field it does not know is handled by the UnknownParams policy. Known
// fields include the vLLM/SGLang sampling extensions (min_tokens, no_stop_trim, ...). Checks
// that need the model (model name, token ids vs vocab, context length) are done by the
// Frontend.
//
// Conventions (docs/openai_api.md): `null` on an optional field means "default"; a known field
// with a wrong type or an out-of-range value is a 400 whose `param` names the field.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "strata/openai/tool_calls.h"
#include "strata/types/sampling.h"

namespace strata::openai {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} sent with http_status.
// Empty param/code serialize as null.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
  int retry_after_s = 0;  // > 0: sent as a Retry-After header (from kRetryAfterPayload)

  static ApiError BadRequest(std::string message, std::string param = "");
  static ApiError ModelNotFound(std::string_view model);  // 404, code "model_not_found"
  static ApiError PromptTooLong(std::string message);     // 413
};

// The HTTP status a backend failure maps to when nothing was sent yet (see backend.h):
// InvalidArgument 400, NotFound 404, AlreadyExists 409, OutOfRange 413, ResourceExhausted 429, Unavailable 503,
// Cancelled 499 (the client is gone; nothing is sent), anything else 500.
int HttpStatusForCode(absl::StatusCode code);
// The ApiError for a failed backend event (type by status: 4xx invalid_request_error,
// 429 rate_limit_error/"rate_limit_exceeded", 5xx server_error).
ApiError ApiErrorFromStatus(const absl::Status& status);

// What a request field nobody here knows gets: kReject answers 400 "Unrecognized request
// argument supplied: X" as OpenAI's API does; kWarn and kIgnore serve the request without it
// (as vLLM and SGLang do) and report its name in CommonRequest::unknown_params (the Frontend
// counts and logs them). Known features strata does not implement are refused under every
// policy: ignoring them would change the answer's meaning.
enum class UnknownParams { kReject, kWarn, kIgnore };
// "reject", "warn" or "ignore"; InvalidArgument otherwise.
absl::Status ParseUnknownParams(std::string_view name, UnknownParams* out);
std::string_view UnknownParamsName(UnknownParams policy);

struct ParseOptions {
  UnknownParams unknown_params = UnknownParams::kReject;
};

// Unknown field names kept per request (the rest are dropped), and the bytes kept of each.
inline constexpr int kMaxUnknownParamsListed = 8;
inline constexpr int kMaxUnknownParamNameBytes = 64;

// Parameters shared by both endpoints.
struct CommonRequest {
  std::string model;
  // max_tokens is left at -1 when the client did not set it: the Frontend resolves it (16 for
  // completions, the rest of the context window for chat) and clips it to the context window.
  SamplingParams sampling;
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // vLLM's add_special_tokens: whether tokenizing the prompt adds the tokenizer's special
  // tokens (BOS). Unset: the endpoint's default (completions true, chat false).
  std::optional<bool> add_special_tokens;
  // Fields that were not recognized and were served without (kWarn/kIgnore), at most
  // kMaxUnknownParamsListed names, each cut to kMaxUnknownParamNameBytes, every byte outside
  // [A-Za-z0-9_.-] replaced by '_'.
  std::vector<std::string> unknown_params;
};

// One prompt of /v1/completions: text to tokenize, or token ids as given.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  CommonRequest common;
  std::vector<PromptInput> prompts;  // a batch: each prompt has its own n choices
  // sampling.logprobs: -1 when `logprobs` is absent/null, else 0..20 (top alternatives).
  // Each choice's text starts with its prompt (a text prompt as sent, token ids decoded).
  bool echo = false;
};

struct ChatRequest {
  CommonRequest common;
  // Normalized messages for the chat template: every content is a string (text parts joined
  // with "\n"); an assistant's tool_calls carry their arguments as objects (a JSON string
  // holding one is parsed); other message keys (name, tool_call_id...) are kept as sent.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  ToolsSpec tools;  // tools, tool_choice, parallel_tool_calls
  bool logprobs = false;  // sampling.logprobs = top_logprobs when true, else -1
  bool add_generation_prompt = true;  // vLLM's: end the prompt with the assistant's turn
  // vLLM's: the final (assistant) message stays open and the model continues it; excludes
  // add_generation_prompt.
  bool continue_final_message = false;
};

// POST /tokenize as vLLM serves it: {"prompt": text} or {"messages": [...]} (chat template
// applied), with optional model, add_special_tokens, add_generation_prompt,
// continue_final_message, chat_template_kwargs and tools (with tool_choice, as chat reads
// them); other fields are ignored.
struct TokenizeRequest {
  std::string model;  // empty: not given
  bool chat = false;
  std::string prompt;
  nlohmann::ordered_json messages;  // normalized as ChatRequest's
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  ToolsSpec tools;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<bool> add_special_tokens;
};

// POST /detokenize: {"tokens": [ids], "model"?}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// All return nullopt on success (and fill *out), else the error to answer with.
std::optional<ApiError> ParseTokenizeRequest(std::string_view body, TokenizeRequest* out);
std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, DetokenizeRequest* out);
std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* out,
                                               const ParseOptions& options = {});
std::optional<ApiError> ParseChatRequest(std::string_view body, ChatRequest* out,
                                         const ParseOptions& options = {});

}  // namespace strata::openai
