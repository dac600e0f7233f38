// Structured output in the engine, on the built-in tiny-llama preset (random weights): every
// constrained output follows its constraint, ends with "stop" when complete and "length" when
// max_tokens cuts it, on both sampling paths.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/engine/engine.h"
#include "strata/engine/presets.h"
#include "strata/grammar/grammar.h"

namespace strata {
namespace {

class EngineGrammarTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/strata_engine_grammar_test_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama", *dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  std::unique_ptr<Engine> Make(bool device_sampling) {
    EngineOptions opts;
    opts.device_sampling = device_sampling;
    opts.runner.block_size = 8;
    opts.runner.num_kv_blocks = 256;
    auto e = Engine::Create(*dir_, opts);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  static std::string* dir_;
};
std::string* EngineGrammarTest::dir_ = nullptr;

SamplingParams Guided(GuidedDecoding::Kind kind, std::string spec, float temperature,
                      int max_tokens = 400) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = 11;
  p.max_tokens = max_tokens;
  p.guided = {kind, std::move(spec)};
  return p;
}

constexpr char kSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":8},
  "age":{"type":"integer"},
  "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3},
  "ok":{"type":"boolean"}},
  "required":["name","age","tags","ok"],"additionalProperties":false})";

TEST_F(EngineGrammarTest, JsonSchemaOutputParsesAndFinishesWithStop) {
  for (bool device_sampling : {true, false}) {
    SCOPED_TRACE(device_sampling ? "device sampling" : "host sampling");
    auto e = Make(device_sampling);
    ASSERT_NE(e, nullptr);
    for (float temperature : {0.0f, 1.0f}) {
      auto out = e->Generate({"Describe a person.", "JSON please:"},
                             Guided(GuidedDecoding::Kind::kJsonSchema, kSchema, temperature));
      ASSERT_TRUE(out.ok()) << out.status();
      for (const Completion& c : *out) {
        SCOPED_TRACE(c.text);
        ASSERT_EQ(c.finish_reason, FinishReason::kStop);
        const auto j = nlohmann::json::parse(c.text, nullptr, false);
        ASSERT_TRUE(j.is_object());
        EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 32);
        EXPECT_TRUE(j["age"].is_number_integer());
        EXPECT_TRUE(j["tags"].is_array() && j["tags"].size() <= 3);
        EXPECT_TRUE(j["ok"].is_boolean());
        EXPECT_EQ(j.size(), 4u);
      }
    }
  }
}

// The device route (masks applied by the plugin's mask_logits, sampled by its `sample`) and the
// host route (masks and sampling on the host) draw the same tokens from the same seeds: the
// same rule, the same draws. Also with min_tokens, whose ban on stop tokens is a mask too.
TEST_F(EngineGrammarTest, DeviceMasksDrawWhatTheHostRouteDraws) {
  auto device = Make(/*device_sampling=*/true);
  auto host = Make(/*device_sampling=*/false);
  ASSERT_TRUE(device && host);
  ASSERT_TRUE(device->runner().can_mask());
  const std::vector<std::string> prompts = {"Describe a person.", "JSON please:", "x"};
  for (float temperature : {0.0f, 0.8f}) {
    for (int kind = 0; kind < 3; ++kind) {
      SamplingParams p =
          kind == 0 ? Guided(GuidedDecoding::Kind::kJsonSchema, kSchema, temperature)
          : kind == 1 ? Guided(GuidedDecoding::Kind::kRegex, R"([a-z]{1,6}( [a-z]{1,6}){0,5})",
                               temperature)
                      : SamplingParams{};
      if (kind == 2) {  // no constraint: min_tokens alone
        p.temperature = temperature;
        p.seed = 5;
        p.max_tokens = 24;
        p.min_tokens = 12;
      }
      SCOPED_TRACE(absl::StrCat("temperature ", temperature, " kind ", kind));
      auto a = device->Generate(prompts, p);
      auto b = host->Generate(prompts, p);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ((*a)[i].tokens, (*b)[i].tokens) << (*a)[i].text << " / " << (*b)[i].text;
        EXPECT_EQ((*a)[i].finish_reason, (*b)[i].finish_reason);
        if (kind == 2) EXPECT_GE((*a)[i].tokens.size(), 12u);
      }
    }
  }
}

TEST_F(EngineGrammarTest, RegexAndChoiceOutputsMatch) {
  auto e = Make(/*device_sampling=*/true);
  ASSERT_NE(e, nullptr);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    SamplingParams p = Guided(GuidedDecoding::Kind::kRegex, R"(\d{3}-[a-z]{2,4}( ok)?)", 1.0f);
    p.seed = seed;
    auto out = e->Generate({"Code:"}, p);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(std::regex_match((*out)[0].text, std::regex(R"(\d{3}-[a-z]{2,4}( ok)?)")))
        << (*out)[0].text;
    EXPECT_EQ((*out)[0].finish_reason, FinishReason::kStop);
    p = Guided(GuidedDecoding::Kind::kChoice, R"(["alpha","beta","gamma delta"])", 1.0f);
    p.seed = seed;
    out = e->Generate({"Pick:"}, p);
    ASSERT_TRUE(out.ok()) << out.status();
    const std::string& text = (*out)[0].text;
    EXPECT_TRUE(text == "alpha" || text == "beta" || text == "gamma delta") << text;
    EXPECT_EQ((*out)[0].finish_reason, FinishReason::kStop);
  }
}

TEST_F(EngineGrammarTest, MaxTokensCutsWithLengthAndAPrefixOfTheLanguage) {
  auto e = Make(/*device_sampling=*/false);
  ASSERT_NE(e, nullptr);
  auto out = e->Generate({"Hi"}, Guided(GuidedDecoding::Kind::kJsonSchema, kSchema, 1.0f, 3));
  ASSERT_TRUE(out.ok()) << out.status();
  const Completion& c = (*out)[0];
  EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.tokens.size(), 3u);
  auto g = grammar::Grammar::Compile({GuidedDecoding::Kind::kJsonSchema, kSchema});
  ASSERT_TRUE(g.ok());
  EXPECT_NE((*g)->Advance((*g)->start(), c.text), grammar::Grammar::kDead) << c.text;
}

TEST_F(EngineGrammarTest, BadConstraintsAndResumedTokensOutsideThemAreRefused) {
  auto e = Make(/*device_sampling=*/true);
  ASSERT_NE(e, nullptr);
  absl::Status bad = e->AddRequest(
      "r1", {1, 2, 3}, Guided(GuidedDecoding::Kind::kJsonSchema, R"({"type":"nope"})", 1.0f));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  // A resumed output must follow the constraint: "x" cannot start a JSON object.
  const auto x = e->tokenizer().Encode("x", /*add_special_tokens=*/false);
  ResumedOutput resumed;
  resumed.tokens = x;
  absl::Status off = e->AddRequest(
      "r2", {1, 2, 3}, Guided(GuidedDecoding::Kind::kJsonObject, "", 1.0f), resumed);
  EXPECT_EQ(off.code(), absl::StatusCode::kInvalidArgument) << off;
  // One that does continues from where it was and completes.
  resumed.tokens = e->tokenizer().Encode("{\"k\":", /*add_special_tokens=*/false);
  ASSERT_TRUE(
      e->AddRequest("r3", {1, 2, 3}, Guided(GuidedDecoding::Kind::kJsonObject, "", 1.0f), resumed)
          .ok());
  std::string text;
  FinishReason finish = FinishReason::kNone;
  while (e->HasUnfinished()) {
    auto step = e->Step();
    ASSERT_TRUE(step.ok());
    for (const auto& o : *step) {
      text += o.new_text;
      if (o.finished) finish = o.finish_reason;
    }
  }
  EXPECT_EQ(finish, FinishReason::kStop);
  // text_emitted 0: the resumed tokens' text comes first.
  EXPECT_EQ(text.rfind("{\"k\":", 0), 0u) << text;
  EXPECT_TRUE(nlohmann::json::parse(text, nullptr, false).is_object()) << text;
}

}  // namespace
}  // namespace strata
