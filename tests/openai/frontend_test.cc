// The OpenAI front end's handlers against a scripted fake backend and a capturing writer:
// choices and usage, streaming framing, errors before/after the stream started, client
// disconnects, auth, the probes and the chat prompt the model actually sees.
#include "strata/openai/frontend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/common/memory_limit.h"
#include "tests/openai/fakes.h"

namespace strata::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ErrorEvent;
using testing::FakeBackend;
using testing::FakeWriter;
using testing::TokensEvent;
using Json = nlohmann::ordered_json;

const std::string kFixtures = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures";

class RecordingObserver : public RequestObserver {
 public:
  void OnFinished(const RequestRecord& record) override {
    absl::MutexLock lock(&mu_);
    records_.push_back(record);
  }
  std::vector<RequestRecord> records() const {
    absl::MutexLock lock(&mu_);
    return records_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<RequestRecord> records_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(kFixtures + "/models/llama3/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    const std::string dir = kFixtures + "/chat_templates/qwen2_5";
    Json cases = Json::parse(ReadFile(dir + "/cases.json"));
    auto tmpl = ChatTemplate::FromString(ReadFile(dir + "/template.jinja"), cases["bos_token"],
                                         cases["eos_token"]);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    template_ = std::make_unique<ChatTemplate>(std::move(*tmpl));
    options_.observer = &observer_;
    MakeFrontend();
  }

  void MakeFrontend(bool with_template = true) {
    ServedModel model{"tiny", tokenizer_.get(), with_template ? template_.get() : nullptr,
                      max_model_len_, 384};
    auto f = Frontend::Create(&backend_, model, options_);
    ASSERT_TRUE(f.ok()) << f.status();
    frontend_ = std::move(*f);
  }

  std::shared_ptr<FakeWriter> Call(const std::string& method, const std::string& path,
                                   const std::string& body,
                                   std::map<std::string, std::string> headers = {}) {
    http::Request req;
    req.method = method;
    req.path = req.target = path;
    req.body = body;
    req.headers = std::move(headers);
    auto writer = std::make_shared<FakeWriter>();
    if (path == "/v1/completions") frontend_->HandleCompletions(req, writer);
    if (path == "/v1/chat/completions") frontend_->HandleChatCompletions(req, writer);
    if (path == "/v1/models") frontend_->HandleModels(req, writer);
    if (path == "/health") frontend_->HandleHealth(req, writer);
    if (path == "/ready") frontend_->HandleReady(req, writer);
    if (path == "/health_generate") frontend_->HandleHealthGenerate(req, writer);
    if (path == "/server_info") frontend_->HandleServerInfo(req, writer);
    if (path == "/model_info") frontend_->HandleModelInfo(req, writer);
    if (path == "/get_load") frontend_->HandleGetLoad(req, writer);
    if (path == "/tokenize") frontend_->HandleTokenize(req, writer);
    if (path == "/detokenize") frontend_->HandleDetokenize(req, writer);
    return writer;
  }

  std::shared_ptr<FakeWriter> Complete(const std::string& fields) {
    return Call("POST", "/v1/completions", R"({"model":"tiny",)" + fields + "}");
  }
  std::shared_ptr<FakeWriter> Chat(const std::string& fields) {
    return Call("POST", "/v1/chat/completions",
                R"({"model":"tiny","messages":[{"role":"user","content":"hi"}])" +
                    (fields.empty() ? "" : "," + fields) + "}");
  }

  static std::vector<Json> JsonEvents(const FakeWriter& w) {
    std::vector<Json> out;
    for (const std::string& e : w.Events()) {
      if (e != "[DONE]") out.push_back(Json::parse(e));
    }
    return out;
  }

  int64_t max_model_len_ = 256;
  FakeBackend backend_;
  RecordingObserver observer_;
  FrontendOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Frontend> frontend_;
};

GenerateEvent Final(std::vector<int32_t> tokens, std::string text, FinishReason reason,
                    int32_t cached = 0) {
  GenerateEvent e = TokensEvent(std::move(tokens), std::move(text), true, reason);
  e.cached_tokens = cached;
  return e;
}

TEST_F(FrontendTest, BatchPromptsWithNChoicesAggregateInOrder) {
  auto w = Complete(R"("prompt":[[1,2,3],[4,5]],"n":2,"seed":10,"max_tokens":4)");
  ASSERT_EQ(backend_.num_calls(), 4);
  const std::string id = backend_.request(0).request_id.substr(
      0, backend_.request(0).request_id.size() - 2);
  EXPECT_THAT(id, ::testing::StartsWith("cmpl-"));
  for (int c = 0; c < 4; ++c) {
    GenerateRequest r = backend_.request(c);
    EXPECT_EQ(r.request_id, id + "-" + std::to_string(c));
    EXPECT_EQ(r.model, "tiny");
    const std::vector<int32_t> prompt =
        c < 2 ? std::vector<int32_t>{1, 2, 3} : std::vector<int32_t>{4, 5};
    EXPECT_EQ(r.prompt, prompt);
    EXPECT_EQ(r.params.max_tokens, 4);
    EXPECT_EQ(*r.params.seed, 10u + c % 2);
  }
  // Finish out of order; nothing is sent until all are done.
  backend_.Emit(3, Final({7}, "d", FinishReason::kStop));
  backend_.Emit(0, TokensEvent({5, 6}, "a"));
  backend_.Emit(0, Final({7}, "b", FinishReason::kLength, /*cached=*/2));
  backend_.Emit(2, Final({9}, "c", FinishReason::kStop, /*cached=*/1));
  EXPECT_EQ(w->responses(), 0);
  backend_.Emit(1, Final({}, "", FinishReason::kStop));
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->content_type(), "application/json");
  Json body = w->json();
  EXPECT_EQ(body["id"], id);
  EXPECT_EQ(body["object"], "text_completion");
  ASSERT_EQ(body["choices"].size(), 4u);
  const std::vector<std::string> texts = {"ab", "", "c", "d"};
  const std::vector<std::string> reasons = {"length", "stop", "stop", "stop"};
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(body["choices"][c]["index"], c);
    EXPECT_EQ(body["choices"][c]["text"], texts[c]);
    EXPECT_EQ(body["choices"][c]["finish_reason"], reasons[c]);
    EXPECT_EQ(body["choices"][c]["logprobs"], nullptr);
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);  // each prompt once
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
  EXPECT_EQ(body["usage"]["total_tokens"], 10);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  auto records = observer_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].http_status, 200);
  EXPECT_EQ(records[0].completion_tokens, 5);
  EXPECT_EQ(records[0].n, 2);
  EXPECT_LT(records[0].ttft, absl::InfiniteDuration());
  EXPECT_EQ(records[0].inter_token_gaps.size(), 1u);  // choice 0's second token event
}

TEST_F(FrontendTest, TextPromptIsTokenizedWithSpecialTokensAndDefaults) {
  auto w = Complete(R"("prompt":"hello world","stop":"x","top_k":-1)");
  ASSERT_EQ(backend_.num_calls(), 1);
  GenerateRequest r = backend_.request(0);
  EXPECT_EQ(r.prompt, tokenizer_->Encode("hello world", /*add_special_tokens=*/true));
  EXPECT_EQ(r.prompt.front(), 380);  // <|begin_of_text|>
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_FALSE(r.params.seed.has_value());
  EXPECT_THAT(r.params.stop, ElementsAre("x"));
  EXPECT_EQ(r.slo_class, "");
  EXPECT_EQ(r.api_key_id, "");
}

TEST_F(FrontendTest, ChatPromptIsTheRenderedTemplateTokenizedWithoutSpecialTokens) {
  const std::string messages =
      R"([{"role":"system","content":"Be brief."},)"
      R"({"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}])";
  auto w = Call("POST", "/v1/chat/completions",
                R"({"model":"tiny","messages":)" + messages + "}",
                {{"x-slo-class", "interactive"}});
  ASSERT_EQ(backend_.num_calls(), 1);
  Json expected_messages = Json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi\nthere"}])");
  auto rendered = template_->Render(expected_messages, /*add_generation_prompt=*/true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_THAT(*rendered, HasSubstr("<|im_start|>assistant\n"));
  const std::vector<int32_t> expected = tokenizer_->Encode(*rendered, false);
  GenerateRequest r = backend_.request(0);
  EXPECT_EQ(r.prompt, expected);
  EXPECT_NE(r.prompt.front(), 380);  // no BOS added on top of the template
  EXPECT_THAT(r.prompt, ::testing::Contains(382));  // <|im_start|> as one special token
  // Chat's default max_tokens: the rest of the context window.
  EXPECT_EQ(r.params.max_tokens, 256 - static_cast<int>(expected.size()));
  EXPECT_EQ(r.slo_class, "interactive");
  EXPECT_THAT(r.request_id, ::testing::StartsWith("chatcmpl-"));
  backend_.Emit(0, Final({1, 2}, "Hello!", FinishReason::kStop));
  Json body = w->json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello!");
  EXPECT_EQ(body["usage"]["prompt_tokens"], static_cast<int64_t>(expected.size()));
}

TEST_F(FrontendTest, ChatStreamInterleavesChoicesWithUsage) {
  auto w = Chat(R"("n":2,"stream":true,"stream_options":{"include_usage":true})");
  ASSERT_EQ(backend_.num_calls(), 2);
  EXPECT_EQ(w->responses(), 0);  // the stream starts with the first event
  backend_.Emit(1, TokensEvent({10}, "B1"));
  EXPECT_TRUE(w->streaming());
  backend_.Emit(0, TokensEvent({11}, "A1"));
  backend_.Emit(1, Final({12}, "B2", FinishReason::kLength));
  backend_.Emit(0, Final({}, "", FinishReason::kStop));
  ASSERT_TRUE(w->ended());
  EXPECT_EQ(w->status(), 200);
  EXPECT_EQ(w->content_type(), "text/event-stream");
  const std::vector<std::string> raw = w->Events();
  ASSERT_FALSE(raw.empty());
  EXPECT_EQ(raw.back(), "[DONE]");
  std::vector<Json> events = JsonEvents(*w);
  // role B, B1, role A, A1, B2, finish B, finish A, usage
  ASSERT_EQ(events.size(), 8u);
  std::vector<std::string> summary;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json& e = events[i];
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_TRUE(e.contains("usage") && e["usage"].is_null());
    const Json& c = e["choices"][0];
    std::string s = std::to_string(c["index"].get<int>()) + ":" + c["delta"].dump();
    if (!c["finish_reason"].is_null()) s += ":" + c["finish_reason"].get<std::string>();
    summary.push_back(s);
  }
  EXPECT_THAT(summary, ElementsAre(R"(1:{"role":"assistant","content":""})",
                                   R"(1:{"content":"B1"})",
                                   R"(0:{"role":"assistant","content":""})",
                                   R"(0:{"content":"A1"})", R"(1:{"content":"B2"})",
                                   "1:{}:length", "0:{}:stop"));
  const Json& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(w->writes_after_end(), 0);
}

TEST_F(FrontendTest, CompletionStreamWithLogprobs) {
  auto w = Complete(R"("prompt":[1,2],"stream":true,"logprobs":1)");
  GenerateEvent e = TokensEvent({65}, "x");
  e.logprobs = {{65, -0.1f, {{65, -0.1f}}}};
  backend_.Emit(0, e);
  GenerateEvent last = Final({66}, "y", FinishReason::kLength);
  last.logprobs = {{66, -0.2f, {{66, -0.2f}}}};
  backend_.Emit(0, last);
  std::vector<Json> events = JsonEvents(*w);
  ASSERT_EQ(events.size(), 2u);  // no usage chunk without include_usage
  EXPECT_FALSE(events[0].contains("usage"));
  EXPECT_EQ(events[0]["object"], "text_completion");
  EXPECT_EQ(events[0]["choices"][0]["text"], "x");
  EXPECT_EQ(events[0]["choices"][0]["finish_reason"], nullptr);
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "length");
  const Json& lp = events[1]["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"][0], tokenizer_->Decode(std::vector<int32_t>{66}));
  // text_offset runs on across chunks.
  EXPECT_EQ(lp["text_offset"][0],
            static_cast<int64_t>(tokenizer_->Decode(std::vector<int32_t>{65}).size()));
  EXPECT_EQ(w->Events().back(), "[DONE]");
}

TEST_F(FrontendTest, EchoPrependsThePromptToEachChoice) {
  // A batch of text prompts (echoed as sent), n = 2.
  auto w = Complete(R"("prompt":["Hello there","Bye"],"n":2,"echo":true)");
  ASSERT_EQ(backend_.num_calls(), 4);
  for (int i = 0; i < 4; ++i) {
    backend_.Emit(i, Final({65}, "!" + std::to_string(i), FinishReason::kLength));
  }
  ASSERT_EQ(w->status(), 200);
  const Json body = w->json();
  EXPECT_EQ(body["choices"][0]["text"], "Hello there!0");
  EXPECT_EQ(body["choices"][1]["text"], "Hello there!1");
  EXPECT_EQ(body["choices"][2]["text"], "Bye!2");
  EXPECT_EQ(body["choices"][3]["text"], "Bye!3");
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  // Token ids are echoed as their text; the backend still gets the prompt as tokens.
  auto t = Complete(R"("prompt":[72,105],"echo":true)");
  ASSERT_EQ(backend_.num_calls(), 5);
  EXPECT_EQ(backend_.request(4).prompt, (std::vector<int32_t>{72, 105}));
  backend_.Emit(4, Final({65}, "!", FinishReason::kLength));
  const std::string tokens_text = tokenizer_->Decode(std::vector<int32_t>{72, 105}, false);
  ASSERT_FALSE(tokens_text.empty());
  EXPECT_EQ(t->json()["choices"][0]["text"], tokens_text + "!");
  EXPECT_EQ(t->json()["usage"]["prompt_tokens"], 2);

  // Streamed: the prompt leads each choice's first chunk only; max_tokens 0 gives the prompt.
  auto s = Complete(R"("prompt":"Hi","n":2,"echo":true,"stream":true)");
  ASSERT_EQ(backend_.num_calls(), 7);
  backend_.Emit(5, TokensEvent({65}, " a"));
  backend_.Emit(5, Final({66}, " b", FinishReason::kLength));
  backend_.Emit(6, Final({}, "", FinishReason::kLength));
  std::vector<Json> events = JsonEvents(*s);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["text"], "Hi a");
  EXPECT_EQ(events[1]["choices"][0]["text"], " b");
  EXPECT_EQ(events[2]["choices"][0]["index"], 1);
  EXPECT_EQ(events[2]["choices"][0]["text"], "Hi");
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");

  // Without echo nothing is prepended; echo with logprobs is refused.
  auto plain = Complete(R"("prompt":"Hi","echo":false)");
  backend_.Emit(7, Final({65}, "x", FinishReason::kLength));
  EXPECT_EQ(plain->json()["choices"][0]["text"], "x");
  auto refused = Complete(R"("prompt":"Hi","echo":true,"logprobs":1)");
  EXPECT_EQ(refused->status(), 400);
  EXPECT_EQ(refused->json()["error"]["param"], "echo");
  EXPECT_EQ(backend_.num_calls(), 8);
}

TEST_F(FrontendTest, ErrorBeforeStreamStartsIsAnHttpErrorAndCancelsTheOthers) {
  auto w = Complete(R"("prompt":[1],"n":3,"stream":true)");
  ASSERT_EQ(backend_.num_calls(), 3);
  backend_.Emit(1, ErrorEvent(absl::ResourceExhaustedError("overloaded")));
  EXPECT_EQ(w->status(), 429);
  EXPECT_FALSE(w->streaming());
  Json body = w->json();
  EXPECT_EQ(body["error"]["message"], "overloaded");
  EXPECT_EQ(body["error"]["code"], "rate_limit_exceeded");
  EXPECT_TRUE(backend_.cancelled(0));
  EXPECT_TRUE(backend_.cancelled(2));
  backend_.Emit(0, TokensEvent({1}, "late"));  // ignored
  EXPECT_EQ(w->responses(), 1);
  EXPECT_THAT(w->body(), ::testing::Not(HasSubstr("late")));
  auto records = observer_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].http_status, 429);
  EXPECT_TRUE(records[0].failed);
}

TEST_F(FrontendTest, ErrorAfterStreamStartIsAnSseErrorEvent) {
  auto w = Chat(R"("stream":true)");
  backend_.Emit(0, TokensEvent({5}, "partial"));
  backend_.Emit(0, ErrorEvent(absl::UnavailableError("decode worker lost")));
  ASSERT_TRUE(w->ended());
  const std::vector<std::string> raw = w->Events();
  ASSERT_GE(raw.size(), 3u);
  EXPECT_EQ(raw.back(), "[DONE]");
  Json err = Json::parse(raw[raw.size() - 2]);
  EXPECT_EQ(err["error"]["message"], "decode worker lost");
  EXPECT_EQ(err["error"]["type"], "server_error");
  EXPECT_EQ(w->status(), 200);
  auto records = observer_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].failed);
  EXPECT_EQ(records[0].http_status, 200);
}

TEST_F(FrontendTest, AbortedGenerationIsAServerError) {
  auto w = Complete(R"("prompt":[1])");
  backend_.Emit(0, Final({}, "", FinishReason::kAbort));
  EXPECT_EQ(w->status(), 500);
  EXPECT_EQ(w->json()["error"]["type"], "server_error");
}

TEST_F(FrontendTest, ClientDisconnectCancelsEveryChoice) {
  auto w = Complete(R"("prompt":[1],"n":3,"stream":true)");
  backend_.Emit(0, TokensEvent({1}, "a"));
  const std::string before = w->body();
  w->Disconnect();
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(backend_.cancelled(c)) << c;
  backend_.Emit(1, TokensEvent({2}, "b"));
  backend_.Emit(0, ErrorEvent(absl::CancelledError("cancelled")));
  EXPECT_EQ(w->body(), before);
  auto records = observer_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].cancelled);
}

TEST_F(FrontendTest, ClientGoneBeforeStartGeneratesNothing) {
  auto writer = std::make_shared<FakeWriter>();
  writer->Disconnect();
  http::Request req;
  req.body = R"({"model":"tiny","prompt":[1],"n":2})";
  frontend_->HandleCompletions(req, writer);
  EXPECT_EQ(backend_.num_calls(), 0);
  EXPECT_EQ(writer->responses(), 0);
}

TEST_F(FrontendTest, SynchronousBackendAnswersInsideGenerate) {
  backend_.on_generate = [this](int i) {
    backend_.Emit(i, Final({1}, "s" + std::to_string(i), FinishReason::kStop));
  };
  auto w = Complete(R"("prompt":[1],"n":2)");
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json()["choices"][1]["text"], "s1");
}

TEST_F(FrontendTest, SynchronousFailureStopsStartingChoices) {
  backend_.on_generate = [this](int i) {
    backend_.Emit(i, ErrorEvent(absl::UnavailableError("no worker")));
  };
  auto w = Complete(R"("prompt":[1],"n":4)");
  EXPECT_EQ(w->status(), 503);
  EXPECT_EQ(backend_.num_calls(), 1);
}

TEST_F(FrontendTest, EventsFromManyThreadsAreSerialized) {
  constexpr int kChoices = 6, kTokens = 40;
  auto w = Chat(R"("n":6,"stream":true,"stream_options":{"include_usage":true})");
  ASSERT_EQ(backend_.num_calls(), kChoices);
  std::vector<std::thread> threads;
  for (int c = 0; c < kChoices; ++c) {
    threads.emplace_back([this, c] {
      for (int t = 0; t < kTokens; ++t) {
        const bool last = t == kTokens - 1;
        backend_.Emit(c, TokensEvent({t}, std::string(1, char('a' + c)), last,
                                     last ? FinishReason::kLength : FinishReason::kNone));
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(w->ended());
  EXPECT_EQ(w->Events().back(), "[DONE]");
  std::vector<std::string> text(kChoices);
  for (const Json& e : JsonEvents(*w)) {
    if (e["choices"].empty()) {
      EXPECT_EQ(e["usage"]["completion_tokens"], kChoices * kTokens);
      continue;
    }
    const Json& c = e["choices"][0];
    if (c["delta"].contains("content")) text[c["index"].get<int>()] += c["delta"]["content"];
  }
  for (int c = 0; c < kChoices; ++c) EXPECT_EQ(text[c], std::string(kTokens, char('a' + c)));
}

TEST_F(FrontendTest, ValidationErrors) {
  struct Case {
    std::string path, body;
    int status;
    std::string param, code;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{", 400, "", ""},
      {"/v1/completions", R"({"model":"other","prompt":"x"})", 404, "model", "model_not_found"},
      {"/v1/chat/completions", R"({"model":"other","messages":[{"role":"user","content":"x"}]})",
       404, "model", "model_not_found"},
      {"/v1/completions", R"({"model":"tiny","prompt":[1,384]})", 400, "prompt", ""},
      {"/v1/completions", R"({"model":"tiny","prompt":[1],"max_tokens":-1})", 400, "max_tokens",
       ""},
      {"/v1/completions", R"({"model":"tiny","prompt":[1],"stop_token_ids":[999]})", 400,
       "stop_token_ids", ""},
      {"/v1/completions", R"({"model":"tiny","prompt":[1],"logit_bias":{"384":1}})", 400,
       "logit_bias", ""},
      {"/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"logit_bias":{"1":101}})", 400,
       "logit_bias", ""},
      // 256 tokens leave no room in a 256-token context.
      {"/v1/completions", R"({"model":"tiny","prompt":)" + Json(std::vector<int>(256, 1)).dump() +
                              "}",
       413, "prompt", "context_length_exceeded"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    auto w = Call("POST", c.path, c.body);
    EXPECT_EQ(w->status(), c.status);
    Json e = w->json()["error"];
    EXPECT_EQ(e["param"], c.param.empty() ? Json(nullptr) : Json(c.param));
    EXPECT_EQ(e["code"], c.code.empty() ? Json(nullptr) : Json(c.code));
    EXPECT_FALSE(e["message"].get<std::string>().empty());
  }
  EXPECT_EQ(backend_.num_calls(), 0);
  auto records = observer_.records();
  ASSERT_EQ(records.size(), cases.size());
  EXPECT_EQ(records[1].http_status, 404);
  EXPECT_TRUE(records[1].failed);
}

TEST_F(FrontendTest, MaxTokensIsClippedToTheContextWindow) {
  auto w = Complete(R"("prompt":)" + Json(std::vector<int>(250, 1)).dump() +
                    R"(,"max_tokens":100)");
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).params.max_tokens, 6);
}

TEST_F(FrontendTest, MaxPromptTokensOption) {
  options_.max_prompt_tokens = 8;
  MakeFrontend();
  EXPECT_EQ(Complete(R"("prompt":[1,2,3,4,5,6,7,8,9])")->status(), 413);
  Complete(R"("prompt":[1,2,3,4,5,6,7,8])");
  EXPECT_EQ(backend_.num_calls(), 1);
}

TEST_F(FrontendTest, ChatWithoutTemplateIs400) {
  MakeFrontend(/*with_template=*/false);
  auto w = Chat("");
  EXPECT_EQ(w->status(), 400);
  EXPECT_THAT(w->json()["error"]["message"].get<std::string>(), HasSubstr("no chat template"));
}

TEST_F(FrontendTest, ApiKeys) {
  options_.api_keys = {"k1", "k2"};
  MakeFrontend();
  const std::string body = R"({"model":"tiny","prompt":[1]})";
  auto none = Call("POST", "/v1/completions", body);
  EXPECT_EQ(none->status(), 401);
  EXPECT_EQ(none->json()["error"]["code"], "invalid_api_key");
  auto wrong = Call("POST", "/v1/completions", body, {{"authorization", "Bearer k3"}});
  EXPECT_EQ(wrong->status(), 401);
  EXPECT_EQ(Call("GET", "/v1/models", "")->status(), 401);
  EXPECT_EQ(backend_.num_calls(), 0);
  Call("POST", "/v1/completions", body, {{"authorization", "Bearer k2"}});
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).api_key_id, "key-1");
  EXPECT_EQ(Call("GET", "/v1/models", "", {{"authorization", "Bearer k1"}})->status(), 200);
  EXPECT_EQ(Call("GET", "/health", "")->status(), 200);  // probes stay open
}

TEST_F(FrontendTest, RateLimitsAnswer429WithRetryAfterAndGiveBackUnusedTokens) {
  options_.api_keys = {"k1", "k2"};
  options_.api_key_rate_limits = {RateLimit{0, 100}};  // k1: 100 tokens a minute; k2: none
  MakeFrontend();
  const std::map<std::string, std::string> k1 = {{"authorization", "Bearer k1"}};
  const std::string body = R"({"model":"tiny","prompt":[1,2,3],"max_tokens":40})";
  EXPECT_EQ(Call("POST", "/v1/completions", body, k1)->responses(), 0);  // 43 tokens: running
  EXPECT_EQ(Call("POST", "/v1/completions", body, k1)->responses(), 0);  // 86
  auto over = Call("POST", "/v1/completions", body, k1);                 // 129 > 100
  EXPECT_EQ(over->status(), 429);
  EXPECT_EQ(over->json()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(over->json()["error"]["code"], "rate_limit_exceeded");
  EXPECT_THAT(over->json()["error"]["message"].get<std::string>(), HasSubstr("tokens per minute"));
  const int retry_after = std::stoi(over->header("Retry-After"));
  EXPECT_GE(retry_after, 17);  // 29 tokens at 100 a minute
  EXPECT_LE(retry_after, 18);
  EXPECT_EQ(backend_.num_calls(), 2);
  // Another key is not held back by k1's budget.
  EXPECT_EQ(Call("POST", "/v1/completions", body, {{"authorization", "Bearer k2"}})->responses(),
            0);
  // The first request ends after 2 of its 40 tokens: the 38 it did not use come back at once.
  backend_.Emit(0, Final({7, 8}, "ab", FinishReason::kStop));
  EXPECT_EQ(Call("POST", "/v1/completions", body, k1)->responses(), 0);
  EXPECT_EQ(backend_.num_calls(), 4);
  // A request above the whole minute's allowance can never pass: told so, without Retry-After.
  auto huge = Call("POST", "/v1/completions",
                   R"({"model":"tiny","prompt":[1,2,3],"max_tokens":200})", k1);
  EXPECT_EQ(huge->status(), 429);
  EXPECT_THAT(huge->json()["error"]["message"].get<std::string>(), HasSubstr("lower max_tokens"));
  EXPECT_EQ(huge->header("Retry-After"), "");
}

TEST_F(FrontendTest, CacheSaltIsValidatedAndPassedToTheBackend) {
  Complete(R"("prompt":[1],"cache_salt":"tenant-a")");
  Chat(R"("cache_salt":"tenant-b")");
  Complete(R"("prompt":[1],"cache_salt":null)");
  ASSERT_EQ(backend_.num_calls(), 3);
  EXPECT_EQ(backend_.request(0).params.cache_salt, "tenant-a");
  EXPECT_EQ(backend_.request(1).params.cache_salt, "tenant-b");
  EXPECT_EQ(backend_.request(2).params.cache_salt, "");
  const std::string longest(SamplingParams::kMaxCacheSaltBytes, 's');
  Complete(R"("prompt":[1],"cache_salt":")" + longest + "\"");
  ASSERT_EQ(backend_.num_calls(), 4);
  EXPECT_EQ(backend_.request(3).params.cache_salt, longest);
  for (const std::string& bad :
       {std::string(R"("cache_salt":7)"), std::string(R"("cache_salt":"")"),
        std::string(R"("cache_salt":["a"])"), R"("cache_salt":")" + longest + "x\""}) {
    auto w = Complete(R"("prompt":[1],)" + bad);
    EXPECT_EQ(w->status(), 400) << bad;
    EXPECT_EQ(w->json()["error"]["type"], "invalid_request_error") << bad;
    EXPECT_EQ(w->json()["error"]["param"], "cache_salt") << bad;
    EXPECT_THAT(w->json()["error"]["message"].get<std::string>(), HasSubstr("cache_salt"));
  }
  EXPECT_EQ(Chat(R"("cache_salt":"")")->status(), 400);
  EXPECT_EQ(backend_.num_calls(), 4);
}

TEST_F(FrontendTest, LogitBiasReachesTheBackendAndUserIsIgnored) {
  auto c = Complete(R"("prompt":[1],"logit_bias":{"383":100},"user":"u","service_tier":"auto")");
  auto h = Chat(R"("logit_bias":{"0":-100,"5":2.5},"user":"u")");
  ASSERT_EQ(backend_.num_calls(), 2);
  EXPECT_THAT(backend_.request(0).params.logit_bias,
              ElementsAre(std::pair<int32_t, float>(383, 100.0f)));
  auto chat_bias = backend_.request(1).params.logit_bias;
  std::sort(chat_bias.begin(), chat_bias.end());
  EXPECT_THAT(chat_bias, ElementsAre(std::pair<int32_t, float>(0, -100.0f),
                                     std::pair<int32_t, float>(5, 2.5f)));
  backend_.Emit(0, Final({65}, "x", FinishReason::kLength));
  backend_.Emit(1, Final({65}, "x", FinishReason::kLength));
  EXPECT_EQ(c->status(), 200);
  EXPECT_EQ(h->status(), 200);
}

// OpenAI's chat `stop` takes strings only; token ids go in vLLM's stop_token_ids, on chat as
// on completions.
TEST_F(FrontendTest, ChatStopsOnTokenIds) {
  auto ok = Chat(R"("stop_token_ids":[7,383],"stop":["END"])");
  ASSERT_EQ(backend_.num_calls(), 1);
  backend_.Emit(0, Final({7}, "x", FinishReason::kStop));
  EXPECT_EQ(ok->status(), 200);
  EXPECT_THAT(backend_.request(0).params.stop_token_ids, ElementsAre(7, 383));
  EXPECT_THAT(backend_.request(0).params.stop, ElementsAre("END"));
  for (const std::string bad : {R"("stop_token_ids":[384])", R"("stop_token_ids":[-1])",
                                R"("stop_token_ids":"7")", R"("stop":[7])"}) {
    auto w = Chat(bad);
    EXPECT_EQ(w->status(), 400) << bad;
    EXPECT_THAT(w->json()["error"]["param"].get<std::string>(), HasSubstr("stop")) << bad;
  }
  EXPECT_EQ(backend_.num_calls(), 1);
}

TEST_F(FrontendTest, ApiKeyDefaultCacheSaltAppliesWhenTheRequestHasNone) {
  options_.api_keys = {"k1", "k2", "k3"};
  options_.api_key_cache_salts = {"tenant-1", ""};  // k2 has none; k3 no entry at all
  MakeFrontend();
  const std::string body = R"({"model":"tiny","prompt":[1]})";
  const std::string own = R"({"model":"tiny","prompt":[1],"cache_salt":"mine"})";
  Call("POST", "/v1/completions", body, {{"authorization", "Bearer k1"}});
  Call("POST", "/v1/completions", own, {{"authorization", "Bearer k1"}});
  Call("POST", "/v1/completions", body, {{"authorization", "Bearer k2"}});
  Call("POST", "/v1/completions", body, {{"authorization", "Bearer k3"}});
  Call("POST", "/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})",
       {{"authorization", "Bearer k1"}});
  ASSERT_EQ(backend_.num_calls(), 5);
  EXPECT_EQ(backend_.request(0).params.cache_salt, "tenant-1");
  EXPECT_EQ(backend_.request(1).params.cache_salt, "mine");
  EXPECT_EQ(backend_.request(2).params.cache_salt, "");
  EXPECT_EQ(backend_.request(3).params.cache_salt, "");
  EXPECT_EQ(backend_.request(4).params.cache_salt, "tenant-1");
  // More salts than keys, or an oversized one, is a configuration error.
  FrontendOptions bad = options_;
  bad.api_key_cache_salts = {"a", "b", "c", "d"};
  ServedModel model{"tiny", tokenizer_.get(), nullptr, max_model_len_, 384};
  EXPECT_FALSE(Frontend::Create(&backend_, model, bad).ok());
  bad.api_key_cache_salts = {std::string(SamplingParams::kMaxCacheSaltBytes + 1, 's')};
  EXPECT_FALSE(Frontend::Create(&backend_, model, bad).ok());
}

TEST_F(FrontendTest, HideCachedTokensReportsZeroToClientsButNotToMetrics) {
  options_.hide_cached_tokens = true;
  MakeFrontend();
  auto w = Complete(R"("prompt":[1,2,3])");
  ASSERT_EQ(backend_.num_calls(), 1);
  backend_.Emit(0, Final({7}, "a", FinishReason::kLength, /*cached=*/2));
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto stream =
      Complete(R"("prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true})");
  ASSERT_EQ(backend_.num_calls(), 2);
  backend_.Emit(1, Final({7}, "a", FinishReason::kLength, /*cached=*/2));
  const std::vector<Json> events = JsonEvents(*stream);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto records = observer_.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].cached_tokens, 2);
  EXPECT_EQ(records[1].cached_tokens, 2);
  // Without the option the same event shows its cached tokens.
  options_.hide_cached_tokens = false;
  MakeFrontend();
  auto shown = Complete(R"("prompt":[1,2,3])");
  backend_.Emit(2, Final({7}, "a", FinishReason::kLength, /*cached=*/2));
  EXPECT_EQ(shown->json()["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST_F(FrontendTest, ModelsHealthReady) {
  auto models = Call("GET", "/v1/models", "");
  EXPECT_EQ(models->status(), 200);
  Json m = models->json();
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "strata");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  EXPECT_GT(m["data"][0]["created"].get<int64_t>(), 0);

  auto health = Call("GET", "/health", "");
  EXPECT_EQ(health->status(), 200);
  EXPECT_EQ(health->body(), R"({"status":"ok"})");
  EXPECT_EQ(Call("GET", "/ready", "")->status(), 200);
  backend_.ready = false;
  EXPECT_EQ(Call("GET", "/ready", "")->status(), 503);
}

class RouteRecorder : public http::Server {
 public:
  void Route(std::string method, std::string path, http::Handler handler) override {
    routes[method + " " + path] = std::move(handler);
  }
  absl::Status Start() override { return absl::OkStatus(); }
  int port() const override { return 0; }
  void Shutdown(absl::Duration) override {}
  int64_t open_connections() const override { return 0; }
  std::string tls_description() const override { return ""; }
  std::map<std::string, http::Handler> routes;
};

TEST_F(FrontendTest, InstallRegistersTheRoutes) {
  RouteRecorder server;
  frontend_->Install(server);
  std::vector<std::string> names;
  for (const auto& [name, handler] : server.routes) names.push_back(name);
  EXPECT_THAT(
      names, ElementsAre("GET /get_load", "GET /get_model_info", "GET /get_server_info",
                         "GET /health", "GET /health_generate", "GET /model_info", "GET /ready",
                         "GET /server_info", "GET /v1/models", "GET /v1/models/tiny",
                         "POST /detokenize", "POST /tokenize", "POST /v1/chat/completions",
                         "POST /v1/completions"));
  auto w = std::make_shared<FakeWriter>();
  server.routes["GET /health"](http::Request{}, w);
  EXPECT_EQ(w->status(), 200);
  auto model = std::make_shared<FakeWriter>();
  server.routes["GET /v1/models/tiny"](http::Request{}, model);
  ASSERT_EQ(model->status(), 200);
  EXPECT_EQ(model->json()["id"], "tiny");
  EXPECT_EQ(model->json()["object"], "model");
}

// The limit sits between this process's resident memory now and after it touches 192 MiB
// more: a real reading, so the test sees 503 only because memory really grew, and admission
// again only because it really fell.
TEST_F(FrontendTest, OverTheMemoryLimitNewRequestsGet503UntilMemoryFalls) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  auto resident = ReadResidentBytes();
  ASSERT_TRUE(resident.ok()) << resident.status();
  options_.max_memory_bytes = *resident + 96 * kMiB;
  options_.memory_sample_interval = absl::Milliseconds(5);
  MakeFrontend();
  RouteRecorder server;
  frontend_->Install(server);
  auto post = [&](const std::string& route, const std::string& body) {
    http::Request req;
    req.method = "POST";
    req.path = req.target = route.substr(5);
    req.body = body;
    auto w = std::make_shared<FakeWriter>();
    server.routes[route](req, w);
    return w;
  };
  const std::string completion = R"({"model":"tiny","prompt":[1,2,3],"max_tokens":4})";
  const std::string chat = R"({"model":"tiny","messages":[{"role":"user","content":"hi"}]})";
  auto wait_until = [](auto done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    return done();
  };
  // Under the limit: accepted (it reaches the backend on a request thread).
  auto running = post("POST /v1/completions", completion);
  ASSERT_TRUE(wait_until([&] { return backend_.num_calls() == 1; }));

  const size_t grow = 192 * kMiB;
  void* block = mmap(nullptr, grow, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(block, MAP_FAILED);
  std::memset(block, 1, grow);
  std::shared_ptr<FakeWriter> shed;
  ASSERT_TRUE(wait_until([&] {
    shed = post("POST /v1/completions", completion);
    return shed->status() == 503;
  }));
  EXPECT_EQ(shed->json()["error"]["type"], "server_error");
  EXPECT_EQ(shed->json()["error"]["code"], "memory_limit");
  EXPECT_THAT(shed->json()["error"]["message"].get<std::string>(), HasSubstr("MiB resident"));
  EXPECT_EQ(shed->header("Retry-After"), "1");
  EXPECT_EQ(post("POST /v1/chat/completions", chat)->status(), 503);
  const int calls_while_over = backend_.num_calls();
  const auto records = observer_.records();
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back().shed_reason, "memory");
  EXPECT_EQ(records.back().http_status, 503);
  // The request accepted before runs on to its end.
  backend_.Emit(0, Final({5, 6}, "ok", FinishReason::kStop));
  EXPECT_EQ(running->status(), 200);
  EXPECT_EQ(running->json()["choices"][0]["text"], "ok");

  munmap(block, grow);
  ASSERT_TRUE(wait_until([&] {
    post("POST /v1/completions", completion);
    absl::SleepFor(absl::Milliseconds(20));  // an accepted one reaches the backend
    return backend_.num_calls() > calls_while_over;
  }));
}

TEST_F(FrontendTest, UnknownFieldsAreServedAndRecordedUnderWarn) {
  auto w = Complete(R"("prompt":[1,2],"max_tokens":2,"priority":3,"rid":"x")");
  ASSERT_EQ(backend_.num_calls(), 1);
  backend_.Emit(0, Final({7}, "a", FinishReason::kLength));
  EXPECT_EQ(w->status(), 200);
  auto records = observer_.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_THAT(records[0].unknown_params, ElementsAre("priority", "rid"));
}

TEST_F(FrontendTest, UnknownFieldsAreRefusedUnderReject) {
  options_.unknown_params = UnknownParams::kReject;
  MakeFrontend();
  auto w = Chat(R"("priority":3)");
  EXPECT_EQ(backend_.num_calls(), 0);
  EXPECT_EQ(w->status(), 400);
  EXPECT_EQ(w->json()["error"]["message"], "Unrecognized request argument supplied: priority");
  EXPECT_EQ(w->json()["error"]["param"], "priority");
}

TEST_F(FrontendTest, VllmPromptOptionsReachTheTokenizerAndTemplate) {
  Complete(R"("prompt":"hello world","add_special_tokens":false)");
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).prompt, tokenizer_->Encode("hello world", false));

  Chat(R"("add_generation_prompt":false,"min_tokens":2,"no_stop_trim":true)");
  ASSERT_EQ(backend_.num_calls(), 2);
  Json messages = Json::parse(R"([{"role":"user","content":"hi"}])");
  auto rendered = template_->Render(messages, /*add_generation_prompt=*/false);
  ASSERT_TRUE(rendered.ok());
  const GenerateRequest r = backend_.request(1);
  EXPECT_EQ(r.prompt, tokenizer_->Encode(*rendered, false));
  EXPECT_EQ(r.params.min_tokens, 2);
  EXPECT_TRUE(r.params.include_stop_str_in_output);

  auto w = Complete(R"("prompt":"hi","max_tokens":3,"min_tokens":4)");
  EXPECT_EQ(w->status(), 400);
  EXPECT_EQ(w->json()["error"]["param"], "min_tokens");
  EXPECT_EQ(backend_.num_calls(), 2);
}

TEST_F(FrontendTest, ContinueFinalMessageLeavesTheAssistantTurnOpen) {
  const std::string messages =
      R"([{"role":"user","content":"Tell a story"},{"role":"assistant","content":"Once upon "}])";
  Call("POST", "/v1/chat/completions",
       R"({"model":"tiny","messages":)" + messages +
           R"(,"continue_final_message":true,"add_generation_prompt":false})");
  ASSERT_EQ(backend_.num_calls(), 1);
  auto full = template_->Render(Json::parse(messages), /*add_generation_prompt=*/false);
  ASSERT_TRUE(full.ok());
  // HF's continue_final_message: cut right after the (stripped) content, no end of turn.
  const std::string open = full->substr(0, full->rfind("Once upon") + 9);
  EXPECT_THAT(open, ::testing::EndsWith("<|im_start|>assistant\nOnce upon"));
  EXPECT_EQ(backend_.request(0).prompt, tokenizer_->Encode(open, false));

  auto w = Call("POST", "/tokenize",
                R"({"messages":)" + messages +
                    R"(,"continue_final_message":true,"add_generation_prompt":false})");
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json()["tokens"].get<std::vector<int32_t>>(), tokenizer_->Encode(open, false));
}

TEST_F(FrontendTest, GetLoadSpeaksSglangOrVllmRouter) {
  backend_.load = BackendLoad{3, 2, 90, 4096};
  auto w = Call("GET", "/get_load", "");
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json(),
            Json::parse(R"([{"dp_rank":0,"num_reqs":3,"num_waiting_reqs":2,"num_tokens":90}])"));
  options_.get_load_format = FrontendOptions::LoadFormat::kVllmRouter;
  MakeFrontend();
  w = Call("GET", "/get_load", "");
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json()["load"], 5);
  EXPECT_EQ(w->json()["num_tokens"], 90);
}

TEST_F(FrontendTest, ServerAndModelInfoDescribeTheServedModel) {
  backend_.load.kv_capacity_tokens = 2048;
  auto w = Call("GET", "/server_info", "");
  ASSERT_EQ(w->status(), 200);
  Json info = w->json();
  EXPECT_EQ(info["model_path"], "tiny");  // no path given: the name
  EXPECT_EQ(info["served_model_name"], "tiny");
  EXPECT_EQ(info["max_model_len"], max_model_len_);
  EXPECT_EQ(info["max_total_num_tokens"], 2048);
  EXPECT_EQ(info["dp_size"], 1);
  w = Call("GET", "/model_info", "");
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json()["model_path"], "tiny");
  EXPECT_EQ(w->json()["is_generation"], true);
}

TEST_F(FrontendTest, HealthGenerateGeneratesOneToken) {
  auto ok = Call("GET", "/health_generate", "");
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_EQ(backend_.request(0).params.max_tokens, 1);
  EXPECT_EQ(ok->responses(), 0);  // answered when the token is there
  backend_.Emit(0, Final({7}, "a", FinishReason::kLength));
  EXPECT_EQ(ok->status(), 200);

  auto failed = Call("GET", "/health_generate", "");
  backend_.Emit(1, ErrorEvent(absl::UnavailableError("engine gone")));
  EXPECT_EQ(failed->status(), 503);

  backend_.ready = false;
  EXPECT_EQ(Call("GET", "/health_generate", "")->status(), 503);
  EXPECT_EQ(backend_.num_calls(), 2);
}

TEST_F(FrontendTest, TokenizeAndDetokenizeAsVllmServesThem) {
  auto w = Call("POST", "/tokenize", R"({"model":"tiny","prompt":"hello world"})");
  ASSERT_EQ(w->status(), 200);
  const std::vector<int32_t> ids = tokenizer_->Encode("hello world", true);
  EXPECT_EQ(w->json()["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(w->json()["count"], ids.size());
  EXPECT_EQ(w->json()["max_model_len"], max_model_len_);

  w = Call("POST", "/tokenize", R"({"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(w->status(), 200);
  auto rendered = template_->Render(Json::parse(R"([{"role":"user","content":"hi"}])"), true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(w->json()["tokens"].get<std::vector<int32_t>>(), tokenizer_->Encode(*rendered, false));

  w = Call("POST", "/detokenize", Json{{"tokens", ids}}.dump());
  ASSERT_EQ(w->status(), 200);
  EXPECT_EQ(w->json()["prompt"], tokenizer_->Decode(ids, false));

  EXPECT_EQ(Call("POST", "/tokenize", R"({"model":"other","prompt":"x"})")->status(), 404);
  EXPECT_EQ(Call("POST", "/tokenize", R"({"model":"tiny"})")->status(), 400);
  EXPECT_EQ(Call("POST", "/detokenize", R"({"tokens":[100000]})")->status(), 400);
  EXPECT_EQ(Call("POST", "/detokenize", R"({"tokens":"x"})")->status(), 400);
}

TEST(FrontendCreateTest, RejectsBadArguments) {
  FakeBackend backend;
  EXPECT_FALSE(Frontend::Create(nullptr, ServedModel{}, {}).ok());
  EXPECT_FALSE(Frontend::Create(&backend, ServedModel{"m", nullptr, nullptr, 10, 10}, {}).ok());
}

}  // namespace
}  // namespace strata::openai
