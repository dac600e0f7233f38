// Response formatting: exact JSON (key order included) of responses, chunks, usage, logprobs,
// errors and SSE framing.
#include "strata/openai/format.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::openai {
namespace {

const ResponseMeta kMeta{"cmpl-1", 1700000000, "tiny"};

std::unique_ptr<Tokenizer> LoadTokenizer() {
  auto tok = Tokenizer::FromFile(std::string(STRATA_SOURCE_DIR) +
                                 "/tests/fixtures/models/llama3/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(FormatTest, CompletionResponseExact) {
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<ChoiceOutput> choices(2);
  choices[0] = {0, "Hello", {}, FinishReason::kLength};
  choices[1] = {1, "Bye", {}, FinishReason::kStop};
  const Usage usage{5, 7, 2};
  EXPECT_EQ(DumpJson(CompletionResponseJson(kMeta, choices, usage, *tok, false)),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":0,"text":"Hello","logprobs":null,"finish_reason":"length"},)"
            R"({"index":1,"text":"Bye","logprobs":null,"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,)"
            R"("prompt_tokens_details":{"cached_tokens":2}}})");
}

TEST(FormatTest, ChatResponseExact) {
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<ChoiceOutput> choices(1);
  choices[0] = {0, "Hi \"there\"", {}, FinishReason::kStop};
  const ResponseMeta meta{"chatcmpl-9", 1, "tiny"};
  EXPECT_EQ(DumpJson(ChatResponseJson(meta, choices, Usage{3, 1, 0}, *tok, false)),
            R"({"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"tiny",)"
            R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\""},)"
            R"("logprobs":null,"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(FormatTest, ChatResponseWithToolCallsExact) {
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<ChoiceOutput> choices(2);
  choices[0] = {0, "", {}, FinishReason::kStop, {{"call_a", "f", R"({"x":1})"}}};
  choices[1] = {1, "Checking.", {}, FinishReason::kStop, {{"call_b", "g", "{}"}}};
  const ResponseMeta meta{"chatcmpl-9", 1, "tiny"};
  EXPECT_EQ(
      DumpJson(ChatResponseJson(meta, choices, Usage{3, 1, 0}, *tok, false)["choices"]),
      R"([{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[)"
      R"({"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},)"
      R"("logprobs":null,"finish_reason":"tool_calls"},)"
      R"({"index":1,"message":{"role":"assistant","content":"Checking.","tool_calls":[)"
      R"({"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]},)"
      R"("logprobs":null,"finish_reason":"tool_calls"}])");
}

TEST(FormatTest, ToolCallDeltaAndFinishChunkExact) {
  const ToolCall call{"call_a", "f", "{}"};
  EXPECT_EQ(DumpJson(ToolCallsJson({&call, 1}, 2)),
            R"([{"index":2,"id":"call_a","type":"function",)"
            R"("function":{"name":"f","arguments":"{}"}}])");
  EXPECT_EQ(DumpJson(ChatChunkJsonWithFinish(kMeta, 0, OrderedJson::object(), nullptr, "tool_calls",
                                             false)["choices"]),
            R"([{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}])");
}

TEST(FormatTest, CompletionLogprobs) {
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = tok->Encode("hello world");
  ASSERT_GE(ids.size(), 2u);
  std::vector<SampleResult> lps;
  for (int32_t id : ids) lps.push_back({id, -0.5f, {{id, -0.5f}, {ids[0], -1.5f}}});
  int64_t offset = 0;
  OrderedJson j = CompletionLogprobsJson(*tok, lps, &offset);
  EXPECT_EQ(j.begin().key(), "tokens");
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string t = j["tokens"][i];
    EXPECT_EQ(j["text_offset"][i], static_cast<int64_t>(joined.size()));
    joined += t;
    EXPECT_DOUBLE_EQ(j["token_logprobs"][i].get<double>(), -0.5);
    EXPECT_TRUE(j["top_logprobs"][i].contains(t));
    EXPECT_DOUBLE_EQ(j["top_logprobs"][i][t].get<double>(), -0.5);  // first entry kept
  }
  EXPECT_EQ(joined, "hello world");
  EXPECT_EQ(offset, static_cast<int64_t>(joined.size()));
  // A running offset continues across streamed chunks.
  OrderedJson next = CompletionLogprobsJson(*tok, {&lps[0], 1}, &offset);
  EXPECT_EQ(next["text_offset"][0], static_cast<int64_t>(joined.size()));
}

TEST(FormatTest, ChatLogprobs) {
  auto tok = LoadTokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = tok->Encode("é!");
  std::vector<SampleResult> lps;
  for (int32_t id : ids) {
    lps.push_back({id, -std::numeric_limits<float>::infinity(), {{id, -0.25f}}});
  }
  OrderedJson j = ChatLogprobsJson(*tok, lps);
  ASSERT_EQ(j["content"].size(), ids.size());
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const OrderedJson& e = j["content"][i];
    std::vector<std::string> keys;
    for (auto it = e.begin(); it != e.end(); ++it) keys.push_back(it.key());
    EXPECT_THAT(keys, ::testing::ElementsAre("token", "logprob", "bytes", "top_logprobs"));
    EXPECT_DOUBLE_EQ(e["logprob"].get<double>(), -9999.0);  // -inf is not JSON
    for (int b : e["bytes"]) bytes.push_back(static_cast<char>(b));
    ASSERT_EQ(e["top_logprobs"].size(), 1u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_DOUBLE_EQ(e["top_logprobs"][0]["logprob"].get<double>(), -0.25);
  }
  EXPECT_EQ(bytes, "é!");  // the UTF-8 bytes of all tokens rebuild the text
}

TEST(FormatTest, StreamChunksExact) {
  EXPECT_EQ(DumpJson(CompletionChunkJson(kMeta, 3, "ab", nullptr, FinishReason::kNone, false)),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":3,"text":"ab","logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(
      DumpJson(ChatChunkJson(kMeta, 0, {{"role", "assistant"}, {"content", ""}}, nullptr,
                             FinishReason::kNone, true)),
      R"({"id":"cmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"tiny",)"
      R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,)"
      R"("finish_reason":null}],"usage":null})");
  EXPECT_EQ(DumpJson(ChatChunkJson(kMeta, 1, OrderedJson::object(), nullptr,
                                   FinishReason::kLength, false)),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"tiny","choices":[{"index":1,"delta":{},"logprobs":null,)"
            R"("finish_reason":"length"}]})");
  EXPECT_EQ(DumpJson(UsageChunkJson(kMeta, "chat.completion.chunk", Usage{2, 3, 1})),
            R"({"id":"cmpl-1","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"tiny","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,)"
            R"("total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}})");
}

TEST(FormatTest, ErrorsAndSse) {
  ApiError e = ApiError::BadRequest("bad n", "n");
  EXPECT_EQ(DumpJson(ErrorJson(e)),
            R"({"error":{"message":"bad n","type":"invalid_request_error","param":"n",)"
            R"("code":null}})");
  ApiError plain;
  plain.message = "x";
  EXPECT_EQ(DumpJson(ErrorJson(plain)),
            R"({"error":{"message":"x","type":"invalid_request_error","param":null,)"
            R"("code":null}})");
  EXPECT_EQ(SseData(OrderedJson{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 is replaced, never thrown.
  EXPECT_EQ(DumpJson(OrderedJson(std::string("a\xff"))), "\"a\xEF\xBF\xBD\"");
  EXPECT_EQ(FinishReasonJson(FinishReason::kAbort), nullptr);
}

}  // namespace
}  // namespace strata::openai
