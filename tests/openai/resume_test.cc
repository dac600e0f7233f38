// The front end's part in resuming a request after its router died: Idempotency-Key and
// Last-Event-ID reach the backend, keyed streams number their chunks (SSE `id:`), and a resumed
// stream skips exactly the chunks its client has.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/openai/frontend.h"
#include "tests/openai/fakes.h"

namespace strata::openai {
namespace {

using ::testing::ElementsAre;
using testing::FakeBackend;
using testing::FakeWriter;
using ::testing::HasSubstr;
using testing::TokensEvent;
using Json = nlohmann::ordered_json;

const std::string kFixtures = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures";

// One SSE event: its id ("" without one) and data.
struct Sse {
  std::string id;
  std::string data;
};

std::vector<Sse> ParseSse(const std::string& body) {
  std::vector<Sse> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    Sse e;
    size_t line = pos;
    while (line < end) {
      const size_t nl = std::min(body.find('\n', line), end);
      const std::string l = body.substr(line, nl - line);
      if (l.rfind("id: ", 0) == 0) e.id = l.substr(4);
      if (l.rfind("data: ", 0) == 0) e.data = l.substr(6);
      line = nl + 1;
    }
    out.push_back(std::move(e));
    pos = end + 2;
  }
  return out;
}

// The text of every event's choices, in order.
std::string Texts(const std::vector<Sse>& events, bool chat) {
  std::string out;
  for (const Sse& e : events) {
    if (e.data == "[DONE]") continue;
    const Json chunk = Json::parse(e.data);
    for (const auto& c : chunk["choices"]) {
      if (chat) {
        if (c["delta"].contains("content")) out += c["delta"]["content"].get<std::string>();
      } else {
        out += c["text"].get<std::string>();
      }
    }
  }
  return out;
}

class ResumeFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(kFixtures + "/models/llama3/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    backend_.can_resume = true;
    MakeFrontend();
  }
  void MakeFrontend() {
    ServedModel model{"tiny", tokenizer_.get(), nullptr, 256, 384};
    auto f = Frontend::Create(&backend_, model, {});
    ASSERT_TRUE(f.ok()) << f.status();
    frontend_ = std::move(*f);
  }
  std::shared_ptr<FakeWriter> Complete(const std::string& fields,
                                       std::map<std::string, std::string> headers) {
    http::Request req;
    req.method = "POST";
    req.path = req.target = "/v1/completions";
    req.body = R"({"model":"tiny","prompt":"hi",)" + fields + "}";
    req.headers = std::move(headers);
    auto writer = std::make_shared<FakeWriter>();
    frontend_->HandleCompletions(req, writer);
    return writer;
  }
  // Emits the same five events to call `i`: a, b, c, d, then e with the finish.
  void EmitAnswer(int i) {
    for (const char* t : {"a", "b", "c", "d"}) backend_.Emit(i, TokensEvent({1}, t));
    backend_.Emit(i, TokensEvent({1}, "e", true, FinishReason::kLength));
  }

  FakeBackend backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Frontend> frontend_;
};

TEST_F(ResumeFrontendTest, AKeyedStreamNumbersItsChunksAndAResumeSkipsTheOnesTheClientHas) {
  auto first = Complete(R"("stream":true,"max_tokens":5)", {{"idempotency-key", "req-1"}});
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).idempotency_key, "req-1#0");
  EXPECT_FALSE(backend_.request(0).resume_only);
  EmitAnswer(0);
  const std::vector<Sse> whole = ParseSse(first->body());
  ASSERT_EQ(whole.size(), 6u);  // five chunks and [DONE]
  std::vector<std::string> ids;
  for (const Sse& e : whole) ids.push_back(e.id);
  EXPECT_THAT(ids, ElementsAre("1", "2", "3", "4", "5", ""));

  // The client had three chunks: the retry replays the generation from its start and sends
  // only the rest.
  auto resumed = Complete(R"("stream":true,"max_tokens":5)",
                          {{"idempotency-key", "req-1"}, {"last-event-id", "3"}});
  ASSERT_EQ(backend_.num_calls(), 2);
  EXPECT_EQ(backend_.request(1).idempotency_key, "req-1#0");
  EXPECT_TRUE(backend_.request(1).resume_only);
  EmitAnswer(1);
  const std::vector<Sse> rest = ParseSse(resumed->body());
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0].id, "4");
  EXPECT_EQ(rest[1].id, "5");
  EXPECT_EQ(rest[2].data, "[DONE]");
  std::vector<Sse> had(whole.begin(), whole.begin() + 3);
  EXPECT_EQ(Texts(had, false) + Texts(rest, false), "abcde");
  EXPECT_EQ(Json::parse(rest[1].data)["choices"][0]["finish_reason"], "length");
}

TEST_F(ResumeFrontendTest, SeveralChoicesCountTheirChunksApart) {
  auto first = Complete(R"("stream":true,"max_tokens":2,"n":2)", {{"idempotency-key", "k"}});
  ASSERT_EQ(backend_.num_calls(), 2);
  EXPECT_EQ(backend_.request(1).idempotency_key, "k#1");
  backend_.Emit(0, TokensEvent({1}, "x"));
  backend_.Emit(1, TokensEvent({1}, "y"));
  backend_.Emit(1, TokensEvent({1}, "z", true, FinishReason::kLength));
  backend_.Emit(0, TokensEvent({1}, "w", true, FinishReason::kLength));
  std::vector<std::string> ids;
  for (const Sse& e : ParseSse(first->body())) ids.push_back(e.id);
  EXPECT_THAT(ids, ElementsAre("1.0", "1.1", "1.2", "2.2", ""));

  // Choice 1 was complete, choice 0 had one chunk: only choice 0 must continue.
  auto resumed = Complete(R"("stream":true,"max_tokens":2,"n":2)",
                          {{"idempotency-key", "k"}, {"last-event-id", "1.2"}});
  ASSERT_EQ(backend_.num_calls(), 4);
  EXPECT_TRUE(backend_.request(2).resume_only);
  EXPECT_TRUE(backend_.request(3).resume_only);
  backend_.Emit(3, TokensEvent({1}, "y"));
  backend_.Emit(2, TokensEvent({1}, "x"));
  backend_.Emit(3, TokensEvent({1}, "z", true, FinishReason::kLength));
  backend_.Emit(2, TokensEvent({1}, "w", true, FinishReason::kLength));
  const std::vector<Sse> rest = ParseSse(resumed->body());
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].id, "2.2");
  EXPECT_EQ(Texts(rest, false), "w");
}

TEST_F(ResumeFrontendTest, AResumeTheBackendCannotServeIsA404) {
  auto w = Complete(R"("stream":true,"max_tokens":5)",
                    {{"idempotency-key", "gone"}, {"last-event-id", "2"}});
  ASSERT_EQ(backend_.num_calls(), 1);
  backend_.Emit(0, testing::ErrorEvent(absl::NotFoundError("no worker holds it")));
  EXPECT_EQ(w->status(), 404);
  EXPECT_FALSE(w->streaming());
}

TEST_F(ResumeFrontendTest, BadHeadersAre400AndUnkeyedRequestsAreUnchanged) {
  for (const auto& headers : std::vector<std::map<std::string, std::string>>{
           {{"idempotency-key", std::string(256, 'k')}},
           {{"idempotency-key", "a b"}},
           {{"idempotency-key", "k"}, {"last-event-id", "x"}},
           {{"idempotency-key", "k"}, {"last-event-id", "1.1"}},
           {{"idempotency-key", "k"}, {"last-event-id", "-3"}}}) {
    auto w = Complete(R"("stream":true,"max_tokens":5)", headers);
    EXPECT_EQ(w->status(), 400) << w->body();
    EXPECT_THAT(w->body(), HasSubstr("invalid_request_error"));
  }
  EXPECT_EQ(backend_.num_calls(), 0);
  // No key: no ids, and a Last-Event-ID alone means nothing.
  auto plain = Complete(R"("stream":true,"max_tokens":5)", {{"last-event-id", "3"}});
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).idempotency_key, "");
  EXPECT_FALSE(backend_.request(0).resume_only);
  EmitAnswer(0);
  for (const Sse& e : ParseSse(plain->body())) EXPECT_EQ(e.id, "");
  EXPECT_EQ(Texts(ParseSse(plain->body()), false), "abcde");
}

TEST_F(ResumeFrontendTest, ABackendThatCannotResumeIgnoresTheHeaders) {
  backend_.can_resume = false;
  auto w = Complete(R"("stream":true,"max_tokens":5)",
                    {{"idempotency-key", "k"}, {"last-event-id", "3"}});
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).idempotency_key, "");
  EmitAnswer(0);
  for (const Sse& e : ParseSse(w->body())) EXPECT_EQ(e.id, "");
  EXPECT_EQ(Texts(ParseSse(w->body()), false), "abcde");
}

// A chat stream that calls tools: its tool-call chunks are numbered and skipped like the others.
TEST_F(ResumeFrontendTest, ToolCallChunksAreNumberedAndSkippedToo) {
  const std::string dir = kFixtures + "/chat_templates/qwen2_5";
  std::ifstream cases_in(dir + "/cases.json"), tmpl_in(dir + "/template.jinja");
  std::stringstream cases_text, tmpl_text;
  cases_text << cases_in.rdbuf();
  tmpl_text << tmpl_in.rdbuf();
  const Json cases = Json::parse(cases_text.str());
  auto tmpl = ChatTemplate::FromString(tmpl_text.str(), cases["bos_token"], cases["eos_token"]);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ServedModel model{"tiny", tokenizer_.get(), &*tmpl, 4096, 384};
  auto frontend = Frontend::Create(&backend_, model, {});
  ASSERT_TRUE(frontend.ok()) << frontend.status();
  auto chat = [&](std::map<std::string, std::string> headers) {
    http::Request req;
    req.method = "POST";
    req.path = req.target = "/v1/chat/completions";
    req.body = R"({"model":"tiny","stream":true,"messages":[{"role":"user","content":"time?"}],)"
               R"("tools":[{"type":"function","function":{"name":"get_time"}}]})";
    req.headers = std::move(headers);
    auto writer = std::make_shared<FakeWriter>();
    (*frontend)->HandleChatCompletions(req, writer);
    return writer;
  };
  const std::string call = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  auto emit = [&](int i) {
    backend_.Emit(i, TokensEvent({1}, "Checking.\n"));
    backend_.Emit(i, TokensEvent({1}, call, true, FinishReason::kStop));
  };
  auto first = chat({{"idempotency-key", "tools-1"}});
  emit(0);
  const std::vector<Sse> whole = ParseSse(first->body());
  // The role, the content, the call, the finish; then [DONE].
  ASSERT_EQ(whole.size(), 5u) << first->body();
  EXPECT_EQ(whole[3].id, "4");
  EXPECT_THAT(whole[2].data, HasSubstr("tool_calls"));
  auto resumed = chat({{"idempotency-key", "tools-1"}, {"last-event-id", "2"}});
  emit(1);
  const std::vector<Sse> rest = ParseSse(resumed->body());
  ASSERT_EQ(rest.size(), 3u) << resumed->body();
  EXPECT_EQ(rest[0].id, "3");
  EXPECT_THAT(rest[0].data, HasSubstr("get_time"));
  EXPECT_THAT(rest[1].data, HasSubstr(R"("finish_reason":"tool_calls")"));
}

}  // namespace
}  // namespace strata::openai
