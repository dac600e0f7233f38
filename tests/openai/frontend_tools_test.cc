// Tool calling through the front end's chat handler, against a scripted fake backend that
// emits chosen text: the tools reach the prompt as the template renders them, and the output's
// calls come back as message.tool_calls (non-streaming) or delta.tool_calls (streaming).
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/openai/frontend.h"
#include "tests/openai/fakes.h"

namespace strata::openai {
namespace {

using testing::FakeBackend;
using testing::FakeWriter;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::TokensEvent;
using Json = nlohmann::ordered_json;

const std::string kFixtures = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr char kTools[] =
    R"([{"type":"function","function":{"name":"get_weather","description":"Weather",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},)"
    R"({"type":"function","function":{"name":"get_time"}}])";

class FrontendToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(kFixtures + "/models/llama3/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    UseTemplate("qwen2_5");
  }

  void UseTemplate(const std::string& family) {
    const std::string dir = kFixtures + "/chat_templates/" + family;
    Json cases = Json::parse(ReadFile(dir + "/cases.json"));
    auto tmpl = ChatTemplate::FromString(ReadFile(dir + "/template.jinja"), cases["bos_token"],
                                         cases["eos_token"]);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    template_ = std::make_unique<ChatTemplate>(std::move(*tmpl));
    MakeFrontend();
  }

  void MakeFrontend() {
    ServedModel model{"tiny", tokenizer_.get(), template_.get(), 4096, 384};
    auto f = Frontend::Create(&backend_, model, options_);
    ASSERT_TRUE(f.ok()) << f.status();
    frontend_ = std::move(*f);
  }

  std::shared_ptr<FakeWriter> Chat(const std::string& fields) {
    http::Request req;
    req.method = "POST";
    req.path = req.target = "/v1/chat/completions";
    req.body = R"({"model":"tiny","messages":[{"role":"user","content":"weather in Paris?"}],)" +
               fields + "}";
    auto writer = std::make_shared<FakeWriter>();
    frontend_->HandleChatCompletions(req, writer);
    return writer;
  }

  std::shared_ptr<FakeWriter> ChatWithTools(const std::string& fields = "") {
    return Chat(std::string(R"("tools":)") + kTools + (fields.empty() ? "" : "," + fields));
  }

  // Emits `pieces` to call `i` as separate events, the last one finishing with kStop.
  void EmitPieces(int i, const std::vector<std::string>& pieces) {
    for (size_t p = 0; p < pieces.size(); ++p) {
      const bool last = p + 1 == pieces.size();
      backend_.Emit(i, TokensEvent({static_cast<int32_t>(p + 1)}, pieces[p], last,
                                   last ? FinishReason::kStop : FinishReason::kNone));
    }
  }

  static std::vector<Json> Deltas(const FakeWriter& w, std::vector<Json>* finish = nullptr) {
    std::vector<Json> out;
    for (const std::string& e : w.Events()) {
      if (e == "[DONE]") continue;
      const Json chunk = Json::parse(e);
      out.push_back(chunk["choices"][0]["delta"]);
      if (finish != nullptr) finish->push_back(chunk["choices"][0]["finish_reason"]);
    }
    return out;
  }

  FakeBackend backend_;
  FrontendOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Frontend> frontend_;
};

constexpr char kWeatherCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

TEST_F(FrontendToolsTest, ToolsAreRenderedByTheTemplateUnlessToolChoiceIsNone) {
  EXPECT_EQ(frontend_->tool_call_parser(), ToolCallParser::kHermes);  // from the template
  const Json messages = Json::parse(R"([{"role":"user","content":"weather in Paris?"}])");
  ChatWithTools();
  ASSERT_EQ(backend_.num_calls(), 1);
  auto with = template_->Render(messages, true, {{"tools", Json::parse(kTools)}});
  ASSERT_TRUE(with.ok());
  EXPECT_THAT(*with, HasSubstr("\"name\": \"get_weather\""));
  EXPECT_EQ(backend_.request(0).prompt, tokenizer_->Encode(*with, false));

  ChatWithTools(R"("tool_choice":"none")");
  ASSERT_EQ(backend_.num_calls(), 2);
  auto without = template_->Render(messages, true);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(backend_.request(1).prompt, tokenizer_->Encode(*without, false));
  EXPECT_NE(*with, *without);
}

TEST_F(FrontendToolsTest, TokenizeRendersToolsAsChatDoes) {
  http::Request req;
  req.method = "POST";
  req.path = req.target = "/tokenize";
  req.body =
      std::string(R"({"messages":[{"role":"user","content":"weather in Paris?"}],"tools":)") +
      kTools + "}";
  auto w = std::make_shared<FakeWriter>();
  frontend_->HandleTokenize(req, w);
  ASSERT_EQ(w->status(), 200) << w->body();
  const Json messages = Json::parse(R"([{"role":"user","content":"weather in Paris?"}])");
  auto with = template_->Render(messages, true, {{"tools", Json::parse(kTools)}});
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(w->json()["tokens"].get<std::vector<int32_t>>(), tokenizer_->Encode(*with, false));
}

TEST_F(FrontendToolsTest, NonStreamingCallsBecomeMessageToolCalls) {
  auto w = ChatWithTools();
  EmitPieces(0, {"Let me check.\n", kWeatherCall,
                 "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"});
  ASSERT_EQ(w->status(), 200);
  const Json body = w->json();
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const Json& message = choice["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["content"], "Let me check.\n");
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  const Json& call = message["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), MatchesRegex("call_[A-Za-z0-9]{24}"));
  EXPECT_NE(call["id"], message["tool_calls"][1]["id"]);
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(message["tool_calls"][1]["function"]["name"], "get_time");
  EXPECT_FALSE(message["tool_calls"][1].contains("index"));
}

TEST_F(FrontendToolsTest, OnlyCallsGiveNullContent) {
  auto w = ChatWithTools(R"("tool_choice":"required")");
  EmitPieces(0, {kWeatherCall});
  const Json message = w->json()["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"].size(), 1u);
}

TEST_F(FrontendToolsTest, OutputThatIsNotACallIsContent) {
  const std::string text = "I think <tool_call>{\"name\": oops}</tool_call> is broken";
  auto w = ChatWithTools();
  EmitPieces(0, {text.substr(0, 12), text.substr(12)});
  const Json choice = w->json()["choices"][0];
  EXPECT_EQ(choice["message"]["content"], text);
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["finish_reason"], "stop");
}

TEST_F(FrontendToolsTest, WithoutToolsNothingIsParsed) {
  auto w = Chat(R"("max_tokens":50)");
  EmitPieces(0, {kWeatherCall});
  EXPECT_EQ(w->json()["choices"][0]["message"]["content"], kWeatherCall);
  auto none = ChatWithTools(R"("tool_choice":"none")");
  EmitPieces(1, {kWeatherCall});
  EXPECT_EQ(none->json()["choices"][0]["message"]["content"], kWeatherCall);
  EXPECT_EQ(none->json()["choices"][0]["finish_reason"], "stop");
}

TEST_F(FrontendToolsTest, ParallelToolCallsFalseKeepsTheFirstCall) {
  auto w = ChatWithTools(R"("parallel_tool_calls":false)");
  EmitPieces(0, {std::string(kWeatherCall) + kWeatherCall});
  EXPECT_EQ(w->json()["choices"][0]["message"]["tool_calls"].size(), 1u);
  auto s = ChatWithTools(R"("parallel_tool_calls":false,"stream":true)");
  EmitPieces(1, {kWeatherCall, kWeatherCall});
  int calls = 0;
  for (const Json& d : Deltas(*s)) calls += d.contains("tool_calls");
  EXPECT_EQ(calls, 1);
}

TEST_F(FrontendToolsTest, StreamingSendsContentThenToolCallDeltas) {
  auto w = ChatWithTools(R"("stream":true)");
  const std::string call2 = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  // The calls arrive split inside their markers and JSON.
  EmitPieces(0, {"Let me", " check.\n<tool", "_call>\n{\"name\": \"get_weather\", \"argu",
                 "ments\": {\"city\": \"Paris\"}}\n</tool_", "call>\n", call2.substr(0, 20),
                 call2.substr(20)});
  ASSERT_TRUE(w->ended());
  std::vector<Json> finish;
  const std::vector<Json> deltas = Deltas(*w, &finish);
  ASSERT_GE(deltas.size(), 5u);
  EXPECT_EQ(deltas.front().dump(), R"({"role":"assistant","content":""})");
  std::string content;
  std::vector<Json> calls;
  for (size_t i = 1; i < deltas.size(); ++i) {
    if (deltas[i].contains("content")) {
      EXPECT_THAT(deltas[i]["content"].get<std::string>(), ::testing::Not(HasSubstr("<")));
      content += deltas[i]["content"].get<std::string>();
    }
    if (deltas[i].contains("tool_calls")) {
      ASSERT_EQ(deltas[i]["tool_calls"].size(), 1u);
      calls.push_back(deltas[i]["tool_calls"][0]);
    }
    if (i + 1 < deltas.size()) EXPECT_TRUE(finish[i].is_null());
  }
  EXPECT_EQ(content, "Let me check.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_THAT(calls[0]["id"].get<std::string>(), MatchesRegex("call_[A-Za-z0-9]{24}"));
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(deltas.back().dump(), "{}");
  EXPECT_EQ(finish.back(), "tool_calls");
  EXPECT_EQ(w->Events().back(), "[DONE]");
}

TEST_F(FrontendToolsTest, StreamedTextThatOnlyLookedLikeACallIsReleased) {
  auto w = ChatWithTools(R"("stream":true,"logprobs":true)");
  EmitPieces(0, {"a <tool", "box> b"});
  std::vector<Json> finish;
  std::string content;
  for (const Json& d : Deltas(*w, &finish)) {
    if (d.contains("content")) content += d["content"].get<std::string>();
    EXPECT_FALSE(d.contains("tool_calls"));
  }
  EXPECT_EQ(content, "a <toolbox> b");
  EXPECT_EQ(finish.back(), "stop");
}

TEST_F(FrontendToolsTest, NoParserRefusesToolsInUse) {
  options_.tool_call_parser = ToolCallParser::kNone;
  MakeFrontend();
  auto w = ChatWithTools();
  EXPECT_EQ(w->status(), 400);
  EXPECT_EQ(w->json()["error"]["param"], "tools");
  EXPECT_THAT(w->json()["error"]["message"].get<std::string>(), HasSubstr("--tool-call-parser"));
  EXPECT_EQ(backend_.num_calls(), 0);
  ChatWithTools(R"("tool_choice":"none")");
  EXPECT_EQ(backend_.num_calls(), 1);
}

TEST_F(FrontendToolsTest, ExplicitMistralParserKeepsSpecialTokensAndShortIds) {
  UseTemplate("mistral_tools");
  EXPECT_EQ(frontend_->tool_call_parser(), ToolCallParser::kMistral);
  auto w = ChatWithTools();
  ASSERT_EQ(backend_.num_calls(), 1);
  EXPECT_FALSE(backend_.request(0).params.skip_special_tokens);
  EmitPieces(0,
             {"[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"});
  const Json call = w->json()["choices"][0]["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), MatchesRegex("[A-Za-z0-9]{9}"));
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");

  options_.tool_call_parser = ToolCallParser::kLlama3Json;  // an explicit choice wins
  MakeFrontend();
  EXPECT_EQ(frontend_->tool_call_parser(), ToolCallParser::kLlama3Json);
}

class ResumableBackend : public FakeBackend {
 public:
  bool CanResume() const override { return true; }
};

// (SSE id, data) of each event of a keyed stream, [DONE] left out; the data without what differs
// between two answers to one request (response id, creation time, tool call ids).
std::vector<std::pair<std::string, Json>> KeyedEvents(const std::string& body) {
  std::vector<std::pair<std::string, Json>> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    std::string id;
    const size_t data = block.find("data: ");
    if (block.rfind("id: ", 0) == 0) id = block.substr(4, block.find('\n') - 4);
    if (data == std::string::npos || block.substr(data + 6) == "[DONE]") continue;
    Json chunk = Json::parse(block.substr(data + 6));
    chunk.erase("id");
    chunk.erase("created");
    for (Json& call : chunk["choices"][0]["delta"]["tool_calls"]) call.erase("id");
    out.emplace_back(id, std::move(chunk));
  }
  return out;
}

// A keyed stream's chunks with tool calls are numbered like any others, so that a retry with
// Last-Event-ID (after its router died; the backend replays the same events) sends only the
// chunks after it.
TEST_F(FrontendToolsTest, KeyedToolStreamsResumeAfterTheLastEventId) {
  ResumableBackend resumable;
  ServedModel model{"tiny", tokenizer_.get(), template_.get(), 4096, 384};
  auto frontend = Frontend::Create(&resumable, model, options_);
  ASSERT_TRUE(frontend.ok()) << frontend.status();
  auto send = [&](const std::string& last_event_id) {
    http::Request req;
    req.method = "POST";
    req.path = req.target = "/v1/chat/completions";
    req.headers["idempotency-key"] = "tools-1";
    if (!last_event_id.empty()) req.headers["last-event-id"] = last_event_id;
    req.body = std::string(R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],)") +
               R"("stream":true,"tools":)" + kTools + "}";
    auto w = std::make_shared<FakeWriter>();
    (*frontend)->HandleChatCompletions(req, w);
    const int call = resumable.num_calls() - 1;
    for (const std::string& piece :
         {std::string("Let me"), std::string(" check.\n<tool"),
          std::string("_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>")}) {
      resumable.Emit(call, TokensEvent({1}, piece));
    }
    resumable.Emit(call, TokensEvent({2}, "\n", true, FinishReason::kStop));
    return KeyedEvents(w->body());
  };
  const auto full = send("");
  ASSERT_GE(full.size(), 5u);  // role, content x2, the call, the finish
  for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(full[i].first, std::to_string(i + 1));
  EXPECT_EQ(full.back().second["choices"][0]["finish_reason"], "tool_calls");
  for (size_t k = 1; k < full.size(); ++k) {
    SCOPED_TRACE(k);
    const auto resumed = send(std::to_string(k));
    ASSERT_EQ(resumed.size(), full.size() - k);
    for (size_t i = 0; i < resumed.size(); ++i) {
      EXPECT_EQ(resumed[i].first, full[k + i].first);
      EXPECT_EQ(resumed[i].second, full[k + i].second);
    }
  }
}

// Requests as OpenAI clients send them (tools, tool_choice, tool_calls with JSON-string
// arguments, tool results) give the prompt HF's apply_chat_template renders from them
// (tests/fixtures/chat_templates/<family>/openai_cases.json, written by transformers).
TEST_F(FrontendToolsTest, WireRequestsRenderAsTransformersDoes) {
  int checked = 0;
  for (const std::string family : {"llama3_1", "qwen2_5", "qwen3", "mistral_tools"}) {
    UseTemplate(family);
    EXPECT_NE(frontend_->tool_call_parser(), ToolCallParser::kNone) << family;
    const Json cases =
        Json::parse(ReadFile(kFixtures + "/chat_templates/" + family + "/openai_cases.json"));
    for (const Json& c : cases["cases"]) {
      SCOPED_TRACE(family + "/" + c["name"].get<std::string>());
      Json body = c["request"];
      body["model"] = "tiny";
      http::Request req;
      req.method = "POST";
      req.path = req.target = "/v1/chat/completions";
      req.body = body.dump();
      auto w = std::make_shared<FakeWriter>();
      const int before = backend_.num_calls();
      frontend_->HandleChatCompletions(req, w);
      if (c.contains("error")) {
        EXPECT_EQ(w->status(), 400);
        EXPECT_EQ(backend_.num_calls(), before);
        continue;
      }
      ASSERT_EQ(backend_.num_calls(), before + 1) << w->body();
      EXPECT_EQ(backend_.request(before).prompt,
                tokenizer_->Encode(c["expected"].get<std::string>(), false));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24);
}

}  // namespace
}  // namespace strata::openai
