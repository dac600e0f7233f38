// The front end serving several models: each request's `model` picks the tokenizer and limits
// and reaches the backend by name, /v1/models lists every model, an unknown name is 404
// model_not_found, and /tokenize needs a name once there are several.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/openai/frontend.h"
#include "tests/openai/fakes.h"

namespace strata::openai {
namespace {

using testing::FakeBackend;
using testing::FakeWriter;
using ::testing::HasSubstr;

const std::string kFixtures = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures";

class FrontendModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Tokenizer::FromFile(kFixtures + "/models/llama3/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    // Two models: "big" with a long context window, "small" with a short one.
    std::vector<ServedModel> models = {
        ServedModel{"big", tokenizer_.get(), nullptr, 256, 384},
        ServedModel{"small", tokenizer_.get(), nullptr, 8, 384},
    };
    auto f = Frontend::Create(&backend_, std::move(models), FrontendOptions{});
    ASSERT_TRUE(f.ok()) << f.status();
    frontend_ = std::move(*f);
  }

  std::shared_ptr<FakeWriter> Post(const std::string& path, const std::string& body) {
    http::Request req;
    req.method = "POST";
    req.path = req.target = path;
    req.body = body;
    auto writer = std::make_shared<FakeWriter>();
    if (path == "/v1/completions") frontend_->HandleCompletions(req, writer);
    if (path == "/tokenize") frontend_->HandleTokenize(req, writer);
    if (path == "/detokenize") frontend_->HandleDetokenize(req, writer);
    return writer;
  }

  FakeBackend backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Frontend> frontend_;
};

TEST_F(FrontendModelsTest, EachRequestReachesTheBackendUnderTheModelItNames) {
  Post("/v1/completions", R"({"model":"small","prompt":[1,2,3],"max_tokens":2})");
  Post("/v1/completions", R"({"model":"big","prompt":[1,2,3],"max_tokens":2})");
  ASSERT_EQ(backend_.num_calls(), 2);
  EXPECT_EQ(backend_.request(0).model, "small");
  EXPECT_EQ(backend_.request(1).model, "big");
}

TEST_F(FrontendModelsTest, LimitsAreThoseOfTheNamedModel) {
  // Nine prompt tokens fit big's window of 256 but not small's of 8.
  const std::string prompt = R"("prompt":[1,2,3,4,5,6,7,8,9],"max_tokens":1)";
  auto small = Post("/v1/completions", R"({"model":"small",)" + prompt + "}");
  EXPECT_EQ(small->status(), 413);
  EXPECT_THAT(small->body(), HasSubstr("maximum context length is 8 tokens"));
  EXPECT_EQ(backend_.num_calls(), 0);
  Post("/v1/completions", R"({"model":"big",)" + prompt + "}");
  ASSERT_EQ(backend_.num_calls(), 1);
  // The default max_tokens is clipped to the named model's window (8 - 3 prompt tokens).
  Post("/v1/completions", R"({"model":"small","prompt":[1,2,3],"max_tokens":100})");
  ASSERT_EQ(backend_.num_calls(), 2);
  EXPECT_EQ(backend_.request(1).params.max_tokens, 5);
}

TEST_F(FrontendModelsTest, UnknownModelIs404ModelNotFound) {
  auto w = Post("/v1/completions", R"({"model":"medium","prompt":[1],"max_tokens":1})");
  EXPECT_EQ(w->status(), 404);
  EXPECT_EQ(w->json()["error"]["code"], "model_not_found");
  EXPECT_EQ(w->json()["error"]["param"], "model");
  EXPECT_EQ(backend_.num_calls(), 0);
}

TEST_F(FrontendModelsTest, ModelsListsEveryModelWithItsLimits) {
  http::Request req;
  req.method = "GET";
  req.path = req.target = "/v1/models";
  auto w = std::make_shared<FakeWriter>();
  frontend_->HandleModels(req, w);
  ASSERT_EQ(w->status(), 200);
  const auto body = w->json();
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][0]["id"], "big");
  EXPECT_EQ(body["data"][0]["max_model_len"], 256);
  EXPECT_EQ(body["data"][1]["id"], "small");
  EXPECT_EQ(body["data"][1]["max_model_len"], 8);
  EXPECT_EQ(body["data"][1]["owned_by"], "strata");
  EXPECT_EQ(body["data"][1]["object"], "model");
}

TEST_F(FrontendModelsTest, TokenizeNeedsAModelNameWhenThereAreSeveral) {
  auto unnamed = Post("/tokenize", R"({"prompt":"hello"})");
  EXPECT_EQ(unnamed->status(), 400);
  EXPECT_EQ(unnamed->json()["error"]["param"], "model");
  auto named = Post("/tokenize", R"({"model":"small","prompt":"hello"})");
  ASSERT_EQ(named->status(), 200);
  EXPECT_EQ(named->json()["max_model_len"], 8);
  EXPECT_EQ(Post("/detokenize", R"({"model":"nope","tokens":[1]})")->status(), 404);
}

TEST(FrontendModelsCreateTest, RefusesNoModelAndNamesGivenTwice) {
  FakeBackend backend;
  auto tok = Tokenizer::FromFile(kFixtures + "/models/llama3/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(Frontend::Create(&backend, std::vector<ServedModel>{}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<ServedModel> twice = {ServedModel{"m", tok->get(), nullptr, 16, 384},
                                    ServedModel{"m", tok->get(), nullptr, 16, 384}};
  auto refused = Frontend::Create(&backend, std::move(twice), {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("model m is served twice"));
}

}  // namespace
}  // namespace strata::openai
