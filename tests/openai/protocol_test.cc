// Request parsing: every parameter's valid and invalid forms, and the error shape.
#include "strata/openai/protocol.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct BadCase {
  std::string body;
  std::string param;    // expected `param` ("" = none)
  std::string message;  // substring of the message
};

CompletionRequest ParseCompletionOk(const std::string& body) {
  CompletionRequest r;
  std::optional<ApiError> e = ParseCompletionRequest(body, &r);
  EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
  return r;
}

ChatRequest ParseChatOk(const std::string& body) {
  ChatRequest r;
  std::optional<ApiError> e = ParseChatRequest(body, &r);
  EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
  return r;
}

std::string Completion(const std::string& extra) {
  return R"({"model":"m","prompt":"hi")" + (extra.empty() ? "" : "," + extra) + "}";
}
std::string Chat(const std::string& extra) {
  return R"({"model":"m","messages":[{"role":"user","content":"hi"}])" +
         (extra.empty() ? "" : "," + extra) + "}";
}

TEST(CompletionParseTest, Defaults) {
  CompletionRequest r = ParseCompletionOk(Completion(""));
  EXPECT_EQ(r.common.model, "m");
  EXPECT_EQ(r.common.n, 1);
  EXPECT_FALSE(r.common.stream);
  EXPECT_EQ(r.common.sampling.max_tokens, -1);  // resolved by the Frontend
  EXPECT_EQ(r.common.sampling.logprobs, -1);
  EXPECT_FLOAT_EQ(r.common.sampling.temperature, 1.0f);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "hi");
}

TEST(CompletionParseTest, EveryParameter) {
  CompletionRequest r = ParseCompletionOk(Completion(
      R"("max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":-3,)"
      R"("stop":["a","bc"],"n":3,"logprobs":5,"echo":false,"presence_penalty":-2,)"
      R"("frequency_penalty":2,"ignore_eos":true,"stream":true,)"
      R"("stream_options":{"include_usage":true},"user":"u","suffix":null,"best_of":3,)"
      R"("repetition_penalty":1.1,"stop_token_ids":[5],"logit_bias":null,"metadata":{"x":1})"));
  const SamplingParams& p = r.common.sampling;
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  ASSERT_TRUE(p.seed.has_value());
  EXPECT_EQ(*p.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_THAT(p.stop, ElementsAre("a", "bc"));
  EXPECT_EQ(r.common.n, 3);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_FLOAT_EQ(p.presence_penalty, -2.0f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(r.common.stream);
  EXPECT_TRUE(r.common.include_usage);
  EXPECT_THAT(p.stop_token_ids, ElementsAre(5));
}

TEST(CompletionParseTest, NullMeansDefault) {
  CompletionRequest r = ParseCompletionOk(Completion(
      R"("max_tokens":null,"temperature":null,"stop":null,"n":null,"logprobs":null,)"
      R"("seed":null,"stream":null,"stream_options":null)"));
  EXPECT_EQ(r.common.sampling.max_tokens, -1);
  EXPECT_FLOAT_EQ(r.common.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.common.sampling.seed.has_value());
  EXPECT_EQ(r.common.n, 1);
}

TEST(CompletionParseTest, PromptForms) {
  CompletionRequest one = ParseCompletionOk(R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_EQ(one.prompts.size(), 1u);
  EXPECT_TRUE(one.prompts[0].is_tokens);
  EXPECT_THAT(one.prompts[0].tokens, ElementsAre(1, 2, 3));

  CompletionRequest texts = ParseCompletionOk(R"({"model":"m","prompt":["a","b"]})");
  ASSERT_EQ(texts.prompts.size(), 2u);
  EXPECT_EQ(texts.prompts[1].text, "b");

  CompletionRequest batch = ParseCompletionOk(R"({"model":"m","prompt":[[1,2],[3]]})");
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_THAT(batch.prompts[0].tokens, ElementsAre(1, 2));
  EXPECT_THAT(batch.prompts[1].tokens, ElementsAre(3));

  CompletionRequest single_stop = ParseCompletionOk(Completion(R"("stop":"END")"));
  EXPECT_THAT(single_stop.common.sampling.stop, ElementsAre("END"));
}

TEST(CompletionParseTest, LogitBiasUserAndServiceTier) {
  CompletionRequest r = ParseCompletionOk(
      Completion(R"("logit_bias":{"5":100,"12":-100,"0":0.5},"user":"u-1","service_tier":"flex")"));
  std::vector<std::pair<int32_t, float>> bias = r.common.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_THAT(bias,
              ElementsAre(std::pair<int32_t, float>(0, 0.5f), std::pair<int32_t, float>(5, 100.0f),
                          std::pair<int32_t, float>(12, -100.0f)));
  ChatRequest c = ParseChatOk(Chat(R"("logit_bias":{"3":-7.5},"user":"u","service_tier":"auto")"));
  EXPECT_THAT(c.common.sampling.logit_bias, ElementsAre(std::pair<int32_t, float>(3, -7.5f)));
  EXPECT_TRUE(
      ParseCompletionOk(Completion(R"("logit_bias":{})")).common.sampling.logit_bias.empty());

  // At most 300 entries.
  std::string many;
  for (int i = 0; i <= 300; ++i) many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
  ParseCompletionOk(Completion("\"logit_bias\":{" + many.substr(0, many.rfind(',')) + "}"));
  CompletionRequest too_many;
  std::optional<ApiError> e =
      ParseCompletionRequest(Completion("\"logit_bias\":{" + many + "}"), &too_many);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "logit_bias");
  EXPECT_THAT(e->message, HasSubstr("at most 300"));
}

TEST(CompletionParseTest, Echo) {
  EXPECT_TRUE(ParseCompletionOk(Completion(R"("echo":true)")).echo);
  EXPECT_FALSE(ParseCompletionOk(Completion(R"("echo":null,"logprobs":2)")).echo);
  EXPECT_FALSE(ParseCompletionOk(Completion("")).echo);
}

TEST(CompletionParseTest, InvalidRequests) {
  const std::vector<BadCase> cases = {
      {"{not json", "", "not valid JSON"},
      {"[1,2]", "", "JSON object"},
      {R"({"model":"m","prompt":"hi","unknown_field":1})", "unknown_field",
       "Unrecognized request argument supplied: unknown_field"},
      {R"({"model":"m","prompt":"hi","messages":[]})", "messages", "Unrecognized"},
      {R"({"model":"m","prompt":"hi","tools":[]})", "tools", "not supported"},
      {Completion(R"("logit_bias":[1,5])"), "logit_bias", "an object"},
      {Completion(R"("logit_bias":{"x":5})"), "logit_bias", "keys must be token ids"},
      {Completion(R"("logit_bias":{"-1":5})"), "logit_bias", "keys must be token ids"},
      {Completion(R"("logit_bias":{"1.5":5})"), "logit_bias", "keys must be token ids"},
      {Completion(R"("logit_bias":{"":5})"), "logit_bias", "keys must be token ids"},
      {Completion(R"("logit_bias":{"4294967296":5})"), "logit_bias", "keys must be token ids"},
      {Completion(R"("logit_bias":{"1":"5"})"), "logit_bias", "must be numbers"},
      {Completion(R"("logit_bias":{"1":100.5})"), "logit_bias", "[-100, 100]"},
      {Completion(R"("logit_bias":{"1":-101})"), "logit_bias", "[-100, 100]"},
      {Completion(R"("logit_bias":{"7":1,"007":2})"), "logit_bias", "more than once"},
      {Completion(R"("user":5)"), "user", "string"},
      {Completion(R"("service_tier":["auto"])"), "service_tier", "string"},
      {R"({"prompt":"hi"})", "model", "model is required"},
      {R"({"model":3,"prompt":"hi"})", "model", "must be a string"},
      {R"({"model":"m"})", "prompt", "prompt is required"},
      {R"({"model":"m","prompt":""})", "prompt", "must not be empty"},
      {R"({"model":"m","prompt":[]})", "prompt", "must not be empty"},
      {R"({"model":"m","prompt":[[]]})", "prompt", "must not be empty"},
      {R"({"model":"m","prompt":[1,-2]})", "prompt", "non-negative"},
      {R"({"model":"m","prompt":[1,"a"]})", "prompt", "token ids"},
      {R"({"model":"m","prompt":["a",[1]]})", "prompt", "one kind"},
      {R"({"model":"m","prompt":5})", "prompt", "must be a string"},
      {R"({"model":"m","prompt":{"a":1}})", "prompt", "must be a string"},
      {Completion(R"("max_tokens":-1)"), "max_tokens", ">= 0"},
      {Completion(R"("max_tokens":"5")"), "max_tokens", "integer"},
      {Completion(R"("max_tokens":1.5)"), "max_tokens", "integer"},
      {Completion(R"("temperature":2.5)"), "temperature", "[0, 2]"},
      {Completion(R"("temperature":-0.1)"), "temperature", "[0, 2]"},
      {Completion(R"("temperature":"hot")"), "temperature", "number"},
      {Completion(R"("top_p":0)"), "top_p", "(0, 1]"},
      {Completion(R"("top_p":1.01)"), "top_p", "(0, 1]"},
      {Completion(R"("top_k":-2)"), "top_k", "[-1,"},
      {Completion(R"("top_k":1.5)"), "top_k", "integer"},
      {Completion(R"("min_p":1.5)"), "min_p", "[0, 1]"},
      {Completion(R"("seed":"x")"), "seed", "integer"},
      {Completion(R"("stop":["a","b","c","d","e"])"), "stop", "at most 4"},
      {Completion(R"("stop":[1])"), "stop", "string"},
      {Completion(R"("stop":5)"), "stop", "string"},
      {Completion(R"("stop":"")"), "stop", "not be empty"},
      {Completion(R"("n":0)"), "n", "[1, 128]"},
      {Completion(R"("n":129)"), "n", "[1, 128]"},
      {Completion(R"("n":true)"), "n", "integer"},
      {Completion(R"("logprobs":21)"), "logprobs", "[0, 20]"},
      {Completion(R"("logprobs":-1)"), "logprobs", "[0, 20]"},
      {Completion(R"("logprobs":true)"), "logprobs", "integer"},
      {Completion(R"("echo":true,"logprobs":0)"), "echo", "not supported"},
      {Completion(R"("echo":"yes")"), "echo", "boolean"},
      {Completion(R"("presence_penalty":2.5)"), "presence_penalty", "[-2, 2]"},
      {Completion(R"("frequency_penalty":-3)"), "frequency_penalty", "[-2, 2]"},
      {Completion(R"("repetition_penalty":0)"), "repetition_penalty", "> 0"},
      {Completion(R"("ignore_eos":1)"), "ignore_eos", "boolean"},
      {Completion(R"("stream":"true")"), "stream", "boolean"},
      {Completion(R"("stream_options":{"include_usage":true})"), "stream_options",
       "only allowed when stream"},
      {Completion(R"("stream":true,"stream_options":5)"), "stream_options", "object"},
      {Completion(R"("stream":true,"stream_options":{"include_usage":1})"),
       "stream_options.include_usage", "boolean"},
      {Completion(R"("suffix":"tail")"), "suffix", "not supported"},
      {Completion(R"("best_of":2)"), "best_of", "must equal n"},
      {Completion(R"("stop_token_ids":[-1])"), "stop_token_ids", "token ids"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    CompletionRequest r;
    std::optional<ApiError> e = ParseCompletionRequest(c.body, &r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->param, c.param);
    EXPECT_THAT(e->message, HasSubstr(c.message));
  }
}

TEST(ChatParseTest, MessagesAreNormalized) {
  ChatRequest r = ParseChatOk(
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},)"
      R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],)"
      R"("name":"bob"},{"role":"assistant","content":null},{"role":"tool","content":"r"}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[1]["name"], "bob");  // other keys kept, in order
  EXPECT_EQ(r.messages[1].dump(), R"({"role":"user","content":"a\nb","name":"bob"})");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.common.sampling.logprobs, -1);
  EXPECT_FALSE(r.logprobs);
}

TEST(ChatParseTest, Parameters) {
  ChatRequest r = ParseChatOk(Chat(
      R"("max_tokens":5,"max_completion_tokens":9,"logprobs":true,"top_logprobs":3,)"
      R"("n":2,"seed":1,"stop":"x","ignore_eos":true,"stream":true,)"
      R"("stream_options":{"include_usage":false},"chat_template_kwargs":{"k":1})"));
  EXPECT_EQ(r.common.sampling.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.common.sampling.logprobs, 3);
  EXPECT_EQ(r.common.n, 2);
  EXPECT_TRUE(r.common.stream);
  EXPECT_FALSE(r.common.include_usage);
  EXPECT_EQ(r.chat_template_kwargs["k"], 1);

  ChatRequest only_logprobs = ParseChatOk(Chat(R"("logprobs":true)"));
  EXPECT_EQ(only_logprobs.common.sampling.logprobs, 0);
}

TEST(ChatParseTest, InvalidRequests) {
  const std::vector<BadCase> cases = {
      {"{", "", "not valid JSON"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"prompt":"p"})", "prompt",
       "Unrecognized request argument supplied: prompt"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"functions":[]})",
       "functions", "send tools and tool_choice instead"},
      {R"({"model":"m"})", "messages", "messages is required"},
      {R"({"model":"m","messages":[]})", "messages", "must not be empty"},
      {R"({"model":"m","messages":"hi"})", "messages", "array"},
      {R"({"model":"m","messages":[5]})", "messages", "message objects"},
      {R"({"model":"m","messages":[{"content":"x"}]})", "messages", "role"},
      {R"({"model":"m","messages":[{"role":"robot","content":"x"}]})", "messages", "robot"},
      {R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages", "content"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages", "text"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
       "messages", "text parts"},
      {Chat(R"("max_tokens":-5)"), "max_tokens", ">= 0"},
      {Chat(R"("max_completion_tokens":-1)"), "max_completion_tokens", ">= 0"},
      {Chat(R"("logprobs":3)"), "logprobs", "boolean"},
      {Chat(R"("top_logprobs":2)"), "top_logprobs", "requires logprobs"},
      {Chat(R"("logprobs":true,"top_logprobs":21)"), "top_logprobs", "[0, 20]"},
      {Chat(R"("temperature":3)"), "temperature", "[0, 2]"},
      {Chat(R"("n":0)"), "n", "[1, 128]"},
      {Chat(R"("chat_template_kwargs":[1])"), "chat_template_kwargs", "object"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    ChatRequest r;
    std::optional<ApiError> e = ParseChatRequest(c.body, &r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param);
    EXPECT_THAT(e->message, HasSubstr(c.message));
  }
}

constexpr char kWeatherTool[] =
    R"({"type":"function","function":{"name":"get_weather","description":"d",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}})";

TEST(ChatToolsParseTest, ToolsAndToolChoice) {
  ChatRequest none = ParseChatOk(Chat(""));
  EXPECT_TRUE(none.tools.tools.empty());
  EXPECT_FALSE(none.tools.active());

  ChatRequest r = ParseChatOk(Chat(std::string(R"("tools":[)") + kWeatherTool +
                                   R"(,{"type":"function","function":{"name":"t-2"}}])"));
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.tools.active());
  EXPECT_TRUE(r.tools.parallel_tool_calls);
  // Passed to the template as sent, key order kept.
  EXPECT_EQ(r.tools.tools[0].dump(), kWeatherTool);

  const std::string tools = std::string(R"("tools":[)") + kWeatherTool + "]";
  EXPECT_EQ(ParseChatOk(Chat(tools + R"(,"tool_choice":"none")")).tools.choice, ToolChoice::kNone);
  EXPECT_FALSE(ParseChatOk(Chat(tools + R"(,"tool_choice":"none")")).tools.active());
  EXPECT_EQ(ParseChatOk(Chat(tools + R"(,"tool_choice":"required")")).tools.choice,
            ToolChoice::kRequired);
  ChatRequest named = ParseChatOk(Chat(
      tools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},)"
              R"("parallel_tool_calls":false)"));
  EXPECT_EQ(named.tools.choice, ToolChoice::kFunction);
  EXPECT_EQ(named.tools.function_name, "get_weather");
  EXPECT_FALSE(named.tools.parallel_tool_calls);
  // "none" without tools is harmless, as are nulls.
  EXPECT_FALSE(ParseChatOk(Chat(R"("tool_choice":"none","tools":null)")).tools.active());
}

TEST(ChatToolsParseTest, BadTools) {
  const std::string tools = std::string(R"("tools":[)") + kWeatherTool + "]";
  std::string many = R"("tools":[)";
  for (int i = 0; i <= kMaxTools; ++i) {
    many += (i ? "," : "") + std::string(R"({"type":"function","function":{"name":"f)") +
            std::to_string(i) + R"("}})";
  }
  many += "]";
  const std::vector<BadCase> cases = {
      {Chat(R"("tools":{})"), "tools", "expected an array"},
      {Chat(R"("tools":[5])"), "tools[0]", "expected an object"},
      {Chat(R"("tools":[{"type":"code_interpreter"}])"), "tools[0].type", "\"function\""},
      {Chat(R"("tools":[{"type":"function"}])"), "tools[0].function", "Missing required"},
      {Chat(R"("tools":[{"type":"function","function":{"description":"x"}}])"),
       "tools[0].function.name", "Missing required"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"a b"}}])"),
       "tools[0].function.name", "1 to 64 characters"},
      {Chat(R"("tools":[{"type":"function","function":{"name":")" + std::string(65, 'a') +
            R"("}}])"),
       "tools[0].function.name", "1 to 64 characters"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])"),
       "tools[0].function.parameters", "JSON Schema"},
      {Chat(R"("tools":[{"type":"function","function":{"name":"f","description":1}}])"),
       "tools[0].function.description", "string"},
      {Chat(std::string(R"("tools":[)") + kWeatherTool + "," + kWeatherTool + "]"),
       "tools[1].function.name", "used by another tool"},
      {Chat(many), "tools", "at most 128 tools"},
      {Chat(tools + R"(,"tool_choice":"sometimes")"), "tool_choice", "\"required\""},
      {Chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})"),
       "tool_choice.function.name", "no function named 'nope'"},
      {Chat(tools + R"(,"tool_choice":{"type":"function"})"), "tool_choice.function.name",
       "expected the name"},
      {Chat(tools + R"(,"tool_choice":5)"), "tool_choice", "string or an object"},
      {Chat(R"("tool_choice":"required")"), "tool_choice", "only allowed when tools"},
      {Chat(tools + R"(,"parallel_tool_calls":"yes")"), "parallel_tool_calls", "boolean"},
      {Chat(R"("function_call":"auto")"), "function_call", "deprecated"},
      {Completion(tools), "tools", "not supported"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    ChatRequest r;
    CompletionRequest cr;
    std::optional<ApiError> e = c.body.find("\"prompt\"") != std::string::npos
                                    ? ParseCompletionRequest(c.body, &cr)
                                    : ParseChatRequest(c.body, &r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param);
    EXPECT_THAT(e->message, HasSubstr(c.message));
  }
}

TEST(ChatToolsParseTest, ToolCallMessagesReachTheTemplateWithObjectArguments) {
  ChatRequest r = ParseChatOk(
      R"({"model":"m","messages":[{"role":"user","content":"weather?"},)"
      R"({"role":"assistant","content":null,"tool_calls":[)"
      R"({"id":"call_1","type":"function","function":{"name":"get_weather",)"
      R"("arguments":"{\"city\": \"Paris\", \"a\": [1]}"}},)"
      R"({"id":"call_2","type":"function","function":{"name":"f","arguments":"not json"}}]},)"
      R"({"role":"tool","tool_call_id":"call_1","content":"21C"},)"
      R"({"role":"assistant","content":"ok","tool_calls":null}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  const auto& calls = r.messages[1]["tool_calls"];
  EXPECT_EQ(calls[0]["function"]["arguments"].dump(), R"({"city":"Paris","a":[1]})");
  EXPECT_EQ(calls[1]["function"]["arguments"], "not json");  // kept as sent
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  EXPECT_FALSE(r.messages[3].contains("tool_calls"));

  const std::vector<BadCase> cases = {
      {R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})",
       "messages[0].tool_calls", "only assistant"},
      {R"({"model":"m","messages":[{"role":"assistant","content":"x","tool_calls":{}}]})",
       "messages[0].tool_calls", "array"},
      {R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":1}]}]})",
       "messages[0].tool_calls[0].function", "name and arguments"},
      {R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})",
       "messages[0].tool_calls[0].function.name", "string"},
      {R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"type":"x",)"
       R"("function":{"name":"f"}}]}]})",
       "messages[0].tool_calls[0].type", "\"function\""},
      {R"({"model":"m","messages":[{"role":"tool","tool_call_id":5,"content":"x"}]})",
       "messages[0].tool_call_id", "string"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    ChatRequest bad;
    std::optional<ApiError> e = ParseChatRequest(c.body, &bad);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->param, c.param);
    EXPECT_THAT(e->message, HasSubstr(c.message));
  }
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A small body of deeply nested arrays is refused before it is parsed (copying or converting it
// would recurse once per level and overflow the stack); nesting a request needs is accepted.
TEST(ExtensionParseTest, VllmAndSglangSamplingFields) {
  // Exactly what vllm-router and sglang-router add to a chat request.
  ChatRequest routed = ParseChatOk(Chat(
      R"("logprobs":false,"no_stop_trim":false,"ignore_eos":false,"continue_final_message":false,)"
      R"("skip_special_tokens":true,"separate_reasoning":true,"stream_reasoning":true,)"
      R"("return_hidden_states":false,"include_reasoning":true,"max_completion_tokens":4)"));
  EXPECT_FALSE(routed.common.sampling.include_stop_str_in_output);
  EXPECT_EQ(routed.common.sampling.max_tokens, 4);
  EXPECT_TRUE(routed.common.unknown_params.empty());

  CompletionRequest r = ParseCompletionOk(
      Completion(R"("min_tokens":3,"include_stop_str_in_output":true,"add_special_tokens":false,)"
                 R"("spaces_between_special_tokens":true,"use_beam_search":false)"));
  EXPECT_EQ(r.common.sampling.min_tokens, 3);
  EXPECT_TRUE(r.common.sampling.include_stop_str_in_output);
  EXPECT_EQ(r.common.add_special_tokens, std::optional<bool>(false));
  EXPECT_FALSE(ParseCompletionOk(Completion("")).common.add_special_tokens.has_value());
  EXPECT_TRUE(ParseCompletionOk(Completion(R"("no_stop_trim":true)"))
                  .common.sampling.include_stop_str_in_output);
  EXPECT_FALSE(ParseChatOk(Chat(R"("add_generation_prompt":false)")).add_generation_prompt);
  ChatRequest continued = ParseChatOk(
      R"({"model":"m","messages":[{"role":"user","content":"hi"},)"
      R"({"role":"assistant","content":"Once upon"}],)"
      R"("continue_final_message":true,"add_generation_prompt":false})");
  EXPECT_TRUE(continued.continue_final_message);
  EXPECT_FALSE(continued.add_generation_prompt);
  EXPECT_TRUE(ParseChatOk(Chat("")).add_generation_prompt);
  // skip_special_tokens=false with spaces_between_special_tokens=false is what strata does.
  EXPECT_FALSE(
      ParseCompletionOk(
          Completion(R"("skip_special_tokens":false,"spaces_between_special_tokens":false)"))
          .common.sampling.skip_special_tokens);
}

TEST(ExtensionParseTest, ValuesStrataCannotHonourAreRefused) {
  const std::vector<BadCase> cases = {
      {Completion(R"("min_tokens":-1)"), "min_tokens", "[0,"},
      {Completion(R"("min_tokens":"2")"), "min_tokens", "integer"},
      {Completion(R"("no_stop_trim":1)"), "no_stop_trim", "boolean"},
      {Completion(R"("include_stop_str_in_output":"y")"), "include_stop_str_in_output", "boolean"},
      {Completion(R"("skip_special_tokens":false,"spaces_between_special_tokens":true)"),
       "spaces_between_special_tokens", "no spaces added around special tokens"},
      {Completion(R"("return_hidden_states":true)"), "return_hidden_states", "not supported"},
      {Completion(R"("use_beam_search":true)"), "use_beam_search", "not supported"},
      {Completion(R"("separate_reasoning":"x")"), "separate_reasoning", "boolean"},
      {Completion(R"("add_special_tokens":0)"), "add_special_tokens", "boolean"},
      {Completion(R"("logits_processors":["x"])"), "logits_processors", "not supported"},
      {Chat(R"("continue_final_message":true)"), "continue_final_message",
       "cannot both be true"},
      {Chat(R"("continue_final_message":true,"add_generation_prompt":false)"), "messages",
       "final assistant message"},
      {Chat(R"("add_generation_prompt":"no")"), "add_generation_prompt", "boolean"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    CompletionRequest completion;
    ChatRequest chat;
    // Refused under every unknown-field policy: these fields are known.
    std::optional<ApiError> e =
        c.body.find("messages") != std::string::npos
            ? ParseChatRequest(c.body, &chat, {UnknownParams::kIgnore})
            : ParseCompletionRequest(c.body, &completion, {UnknownParams::kIgnore});
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param);
    EXPECT_THAT(e->message, HasSubstr(c.message));
  }
}

TEST(GuidedParseTest, EveryFormOfConstraintIsRead) {
  const ChatRequest schema = ParseChatOk(Chat(
      R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,)"
      R"("schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}},)"
      R"("required":["z","a"],"additionalProperties":false}}})"));
  EXPECT_EQ(schema.common.sampling.guided.kind, GuidedDecoding::Kind::kJsonSchema);
  // The schema keeps the client's key order: properties are generated in it.
  EXPECT_LT(schema.common.sampling.guided.spec.find("\"z\""),
            schema.common.sampling.guided.spec.find("\"a\""));
  EXPECT_EQ(ParseChatOk(Chat(R"("response_format":{"type":"json_object"})"))
                .common.sampling.guided.kind,
            GuidedDecoding::Kind::kJsonObject);
  EXPECT_FALSE(ParseChatOk(Chat(R"("response_format":{"type":"text"})"))
                   .common.sampling.guided.active());
  const CompletionRequest regex = ParseCompletionOk(Completion(R"("guided_regex":"[ab]+")"));
  EXPECT_EQ(regex.common.sampling.guided.kind, GuidedDecoding::Kind::kRegex);
  EXPECT_EQ(regex.common.sampling.guided.spec, "[ab]+");
  const CompletionRequest choice = ParseCompletionOk(Completion(R"("guided_choice":["x","y"])"));
  EXPECT_EQ(choice.common.sampling.guided.kind, GuidedDecoding::Kind::kChoice);
  EXPECT_EQ(choice.common.sampling.guided.spec, R"(["x","y"])");
  // guided_json as an object or as a string holding one; SGLang's and vLLM's newer names.
  for (const char* field : {R"("guided_json":{"type":"integer"})",
                            R"("guided_json":"{\"type\":\"integer\"}")",
                            R"("json_schema":"{\"type\":\"integer\"}")",
                            R"("structured_outputs":{"json":{"type":"integer"}})"}) {
    const CompletionRequest r = ParseCompletionOk(Completion(field));
    EXPECT_EQ(r.common.sampling.guided.kind, GuidedDecoding::Kind::kJsonSchema) << field;
    EXPECT_EQ(r.common.sampling.guided.spec, R"({"type":"integer"})") << field;
  }
  for (const char* field : {R"("guided_grammar":"root ::= [a-z]+ \"!\"")",
                            R"("ebnf":"root ::= [a-z]+ \"!\"")",
                            R"("structured_outputs":{"grammar":"root ::= [a-z]+ \"!\""})"}) {
    const CompletionRequest r = ParseCompletionOk(Completion(field));
    EXPECT_EQ(r.common.sampling.guided.kind, GuidedDecoding::Kind::kGrammar) << field;
    EXPECT_EQ(r.common.sampling.guided.spec, R"(root ::= [a-z]+ "!")") << field;
  }
  EXPECT_EQ(ParseCompletionOk(Completion(R"("regex":"a+","guided_decoding_backend":"xgrammar")"))
                .common.sampling.guided.kind,
            GuidedDecoding::Kind::kRegex);
}

TEST(GuidedParseTest, BadConstraintsAreRefusedNamingTheField) {
  const std::vector<BadCase> cases = {
      {Chat(R"("response_format":{"type":"yaml"})"), "response_format.type", "not supported"},
      {Chat(R"("response_format":{"type":"json_schema"})"), "response_format.json_schema",
       "must be an object"},
      {Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})"),
       "response_format.json_schema.schema", "required"},
      {Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"x",)"
            R"("schema":{"type":"integer","minimum":0,"multipleOf":3}}})"),
       "response_format", "unsupported keywords: minimum, multipleOf"},
      {Chat(R"("response_format":"json")"), "response_format", "object"},
      {Completion(R"("guided_regex":"(a")"), "guided_regex", "missing ')'"},
      {Completion(R"("guided_regex":"a{1000}")"), "guided_regex", "repeat bound"},
      {Completion(R"("guided_choice":[])"), "guided_choice", "non-empty"},
      {Completion(R"("guided_choice":"a")"), "guided_choice", "array"},
      {Completion(R"("guided_json":"{")"), "guided_json", "not valid JSON"},
      {Completion(R"("guided_json":{"$ref":"#"})"), "guided_json", "recursive"},
      {Completion(R"("guided_regex":"a","guided_choice":["a"])"), "guided_choice",
       "cannot both be given"},
      {Completion(R"("structured_outputs":{"whatever":"x"})"), "structured_outputs.whatever",
       "not supported"},
      {Completion(R"("guided_grammar":"start: \"a\"")"), "guided_grammar", "grammar:"},
      {Completion(R"("ebnf":"root ::= item\nitem ::= \"(\" item \")\"")"), "ebnf",
       "admits no output"},
      {Completion(R"("guided_decoding_backend":1)"), "guided_decoding_backend", "string"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body);
    CompletionRequest completion;
    ChatRequest chat;
    std::optional<ApiError> e = c.body.find("messages") != std::string::npos
                                    ? ParseChatRequest(c.body, &chat)
                                    : ParseCompletionRequest(c.body, &completion);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->param, c.param);
    EXPECT_THAT(e->message, HasSubstr(c.message));
  }
}

TEST(UnknownParamsTest, PolicyDecidesAndNamesAreBoundedAndSanitized) {
  const std::string body = Completion(R"("priority":1,"rid":"a","we ird\u00e9":2)");
  CompletionRequest rejected;
  std::optional<ApiError> e = ParseCompletionRequest(body, &rejected);  // default: reject
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "Unrecognized request argument supplied: priority");
  for (UnknownParams policy : {UnknownParams::kWarn, UnknownParams::kIgnore}) {
    CompletionRequest r;
    ASSERT_FALSE(ParseCompletionRequest(body, &r, {policy}).has_value());
    EXPECT_THAT(r.common.unknown_params, ElementsAre("priority", "rid", "we_ird__"));
  }
  std::string many;
  for (int i = 0; i < 20; ++i) many += "\"f" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  many += "\"" + std::string(200, 'x') + "\":1";
  CompletionRequest r;
  ASSERT_FALSE(ParseCompletionRequest(Completion(many), &r, {UnknownParams::kWarn}).has_value());
  EXPECT_EQ(r.common.unknown_params.size(), size_t(kMaxUnknownParamsListed));
  CompletionRequest longest;
  ASSERT_FALSE(ParseCompletionRequest(Completion("\"" + std::string(200, 'x') + "\":1"), &longest,
                                      {UnknownParams::kWarn})
                   .has_value());
  EXPECT_THAT(longest.common.unknown_params,
              ElementsAre(std::string(kMaxUnknownParamNameBytes, 'x')));

  UnknownParams parsed = UnknownParams::kReject;
  EXPECT_TRUE(ParseUnknownParams("ignore", &parsed).ok());
  EXPECT_EQ(parsed, UnknownParams::kIgnore);
  EXPECT_EQ(UnknownParamsName(parsed), "ignore");
  EXPECT_FALSE(ParseUnknownParams("loud", &parsed).ok());
}

TEST(TokenizeParseTest, PromptOrMessages) {
  TokenizeRequest t;
  ASSERT_FALSE(ParseTokenizeRequest(R"({"model":"m","prompt":"hi"})", &t).has_value());
  EXPECT_FALSE(t.chat);
  EXPECT_EQ(t.prompt, "hi");
  TokenizeRequest c;
  ASSERT_FALSE(ParseTokenizeRequest(
                   R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":false,)"
                   R"("continue_final_message":false})",
                   &c)
                   .has_value());
  EXPECT_TRUE(c.chat);
  EXPECT_FALSE(c.add_generation_prompt);
  EXPECT_EQ(c.messages[0]["content"], "x");
  TokenizeRequest bad;
  EXPECT_TRUE(ParseTokenizeRequest(R"({"prompt":3})", &bad).has_value());
  EXPECT_TRUE(ParseTokenizeRequest(R"({"model":"m"})", &bad).has_value());
  EXPECT_TRUE(ParseTokenizeRequest("[", &bad).has_value());
  DetokenizeRequest d;
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens":[1,2]})", &d).has_value());
  EXPECT_THAT(d.tokens, ElementsAre(1, 2));
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens":[-1]})", &d).has_value());
  EXPECT_TRUE(ParseDetokenizeRequest(R"({})", &d).has_value());
}

TEST(RequestDepthTest, DeepNestingIsRefusedAnywhereInTheBody) {
  const std::vector<std::string> chats = {
      Chat(R"("chat_template_kwargs":{"a":)" + Nested(100000) + "}"),
      R"({"model":"m","messages":[{"role":"user","content":"hi","x":)" + Nested(100000) + "}]}",
      Chat(R"("metadata":)" + Nested(129)),
  };
  for (const std::string& body : chats) {
    ChatRequest r;
    std::optional<ApiError> e = ParseChatRequest(body, &r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_THAT(e->message, HasSubstr("nested deeper than 128 levels"));
  }
  CompletionRequest c;
  std::optional<ApiError> e = ParseCompletionRequest(Completion(R"("x":)" + Nested(100000)), &c);
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->message, HasSubstr("nested deeper than 128 levels"));

  // 128 levels in all (the body's object is the first) still parse; brackets in strings and
  // escaped quotes do not count.
  const std::string deep_ok =
      Chat(R"("chat_template_kwargs":{"a":)" + Nested(126) + R"(,"s":"[[[[\"{{{{"})");
  ChatRequest ok = ParseChatOk(deep_ok);
  EXPECT_TRUE(ok.chat_template_kwargs.is_object());
}

TEST(ApiErrorTest, StatusMapping) {
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kOutOfRange), 413);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusForCode(absl::StatusCode::kInternal), 500);

  ApiError busy = ApiErrorFromStatus(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(busy.http_status, 429);
  EXPECT_EQ(busy.type, "rate_limit_error");
  EXPECT_EQ(busy.code, "rate_limit_exceeded");
  EXPECT_EQ(busy.message, "queue full");
  ApiError internal = ApiErrorFromStatus(absl::InternalError(""));
  EXPECT_EQ(internal.http_status, 500);
  EXPECT_EQ(internal.type, "server_error");
  EXPECT_FALSE(internal.message.empty());

  ApiError missing = ApiError::ModelNotFound("gpt-x");
  EXPECT_EQ(missing.http_status, 404);
  EXPECT_EQ(missing.code, "model_not_found");
  EXPECT_THAT(missing.message, HasSubstr("gpt-x"));
  EXPECT_EQ(ApiError::PromptTooLong("long").http_status, 413);
}

}  // namespace
}  // namespace strata::openai
