#include "strata/openai/format.h"

#include <cmath>
#include <utility>

namespace strata::openai {
namespace {

// JSON has no -inf; a token the model rules out entirely reports this, as vLLM does.
constexpr float kMinLogprob = -9999.0f;

double JsonLogprob(float lp) { return std::isfinite(lp) ? lp : kMinLogprob; }

std::string TokenText(const Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[1] = {id};
  return tokenizer.Decode(ids, /*skip_special_tokens=*/false);
}

OrderedJson BytesJson(const Tokenizer& tokenizer, int32_t id) {
  OrderedJson bytes = OrderedJson::array();
  for (unsigned char c : tokenizer.TokenBytes(id)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

OrderedJson ChatTokenJson(const Tokenizer& tokenizer, int32_t id, float logprob) {
  OrderedJson t = OrderedJson::object();
  t["token"] = TokenText(tokenizer, id);
  t["logprob"] = JsonLogprob(logprob);
  t["bytes"] = BytesJson(tokenizer, id);
  return t;
}

OrderedJson Header(const ResponseMeta& meta, std::string_view object) {
  OrderedJson j = OrderedJson::object();
  j["id"] = meta.id;
  j["object"] = object;
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

}  // namespace

OrderedJson FinishReasonJson(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    default: return nullptr;
  }
}

OrderedJson UsageJson(const Usage& usage) {
  OrderedJson u = OrderedJson::object();
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  return u;
}

OrderedJson CompletionLogprobsJson(const Tokenizer& tokenizer,
                                   std::span<const SampleResult> logprobs, int64_t* text_offset) {
  OrderedJson tokens = OrderedJson::array(), token_logprobs = OrderedJson::array();
  OrderedJson top_logprobs = OrderedJson::array(), offsets = OrderedJson::array();
  for (const SampleResult& s : logprobs) {
    const std::string text = TokenText(tokenizer, s.token);
    tokens.push_back(text);
    token_logprobs.push_back(JsonLogprob(s.logprob));
    OrderedJson top = OrderedJson::object();
    for (const TokenLogprob& t : s.top) {
      const std::string key = TokenText(tokenizer, t.token);
      if (!top.contains(key)) top[key] = JsonLogprob(t.logprob);  // keep the most likely
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(text.size());
  }
  OrderedJson j = OrderedJson::object();
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(top_logprobs);
  j["text_offset"] = std::move(offsets);
  return j;
}

OrderedJson ChatLogprobsJson(const Tokenizer& tokenizer, std::span<const SampleResult> logprobs) {
  OrderedJson content = OrderedJson::array();
  for (const SampleResult& s : logprobs) {
    OrderedJson entry = ChatTokenJson(tokenizer, s.token, s.logprob);
    OrderedJson top = OrderedJson::array();
    for (const TokenLogprob& t : s.top) top.push_back(ChatTokenJson(tokenizer, t.token, t.logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

OrderedJson CompletionResponseJson(const ResponseMeta& meta,
                                   const std::vector<ChoiceOutput>& choices, const Usage& usage,
                                   const Tokenizer& tokenizer, bool logprobs) {
  OrderedJson j = Header(meta, "text_completion");
  OrderedJson list = OrderedJson::array();
  for (const ChoiceOutput& c : choices) {
    OrderedJson choice = OrderedJson::object();
    choice["index"] = c.index;
    choice["text"] = c.text;
    int64_t offset = 0;
    choice["logprobs"] =
        logprobs ? CompletionLogprobsJson(tokenizer, c.logprobs, &offset) : OrderedJson(nullptr);
    choice["finish_reason"] = FinishReasonJson(c.finish_reason);
    list.push_back(std::move(choice));
  }
  j["choices"] = std::move(list);
  j["usage"] = UsageJson(usage);
  return j;
}

OrderedJson ChatResponseJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                             const Usage& usage, const Tokenizer& tokenizer, bool logprobs) {
  OrderedJson j = Header(meta, "chat.completion");
  OrderedJson list = OrderedJson::array();
  for (const ChoiceOutput& c : choices) {
    OrderedJson choice = OrderedJson::object();
    choice["index"] = c.index;
    if (c.tool_calls.empty()) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      OrderedJson message = OrderedJson::object();
      message["role"] = "assistant";
      message["content"] = c.text.empty() ? OrderedJson(nullptr) : OrderedJson(c.text);
      message["tool_calls"] = ToolCallsJson(c.tool_calls);
      choice["message"] = std::move(message);
    }
    choice["logprobs"] = logprobs ? ChatLogprobsJson(tokenizer, c.logprobs) : OrderedJson(nullptr);
    choice["finish_reason"] =
        c.tool_calls.empty() ? FinishReasonJson(c.finish_reason) : OrderedJson("tool_calls");
    list.push_back(std::move(choice));
  }
  j["choices"] = std::move(list);
  j["usage"] = UsageJson(usage);
  return j;
}

OrderedJson CompletionChunkJson(const ResponseMeta& meta, int index, std::string_view text,
                                OrderedJson logprobs, FinishReason finish_reason,
                                bool include_usage) {
  OrderedJson j = Header(meta, "text_completion");
  OrderedJson choice = OrderedJson::object();
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = FinishReasonJson(finish_reason);
  j["choices"] = OrderedJson::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

OrderedJson ToolCallsJson(std::span<const ToolCall> calls, int first_index) {
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    OrderedJson call = OrderedJson::object();
    if (first_index >= 0) call["index"] = first_index + static_cast<int>(i);
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    list.push_back(std::move(call));
  }
  return list;
}

OrderedJson ChatChunkJson(const ResponseMeta& meta, int index, OrderedJson delta,
                          OrderedJson logprobs, FinishReason finish_reason, bool include_usage) {
  return ChatChunkJsonWithFinish(meta, index, std::move(delta), std::move(logprobs),
                                 FinishReasonJson(finish_reason), include_usage);
}

OrderedJson ChatChunkJsonWithFinish(const ResponseMeta& meta, int index, OrderedJson delta,
                                    OrderedJson logprobs, OrderedJson finish_reason,
                                    bool include_usage) {
  OrderedJson j = Header(meta, "chat.completion.chunk");
  OrderedJson choice = OrderedJson::object();
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  j["choices"] = OrderedJson::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

OrderedJson UsageChunkJson(const ResponseMeta& meta, std::string_view object,
                           const Usage& usage) {
  OrderedJson j = Header(meta, object);
  j["choices"] = OrderedJson::array();
  j["usage"] = UsageJson(usage);
  return j;
}

OrderedJson ErrorJson(const ApiError& error) {
  OrderedJson e = OrderedJson::object();
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] = error.param.empty() ? OrderedJson(nullptr) : OrderedJson(error.param);
  e["code"] = error.code.empty() ? OrderedJson(nullptr) : OrderedJson(error.code);
  return {{"error", std::move(e)}};
}

std::string DumpJson(const OrderedJson& json) {
  return json.dump(-1, ' ', /*ensure_ascii=*/false, OrderedJson::error_handler_t::replace);
}

std::string SseData(const OrderedJson& json) { return "data: " + DumpJson(json) + "\n\n"; }

}  // namespace strata::openai
