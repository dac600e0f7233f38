// ChatTemplate renders byte-identically to Hugging Face apply_chat_template on the fixture
// cases written by scripts/fixtures/make_chat_template_fixtures.py, and reports template
// errors the way the serving path needs them.
#include "strata/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/common/file_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(STRATA_SOURCE_DIR) / "tests/fixtures/chat_templates";

absl::StatusOr<std::string> RenderString(
    const std::string& source,
    const nlohmann::ordered_json& messages = nlohmann::ordered_json::array(),
    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromString(source, "<s>", "</s>");
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->Render(messages, /*add_generation_prompt=*/false, extra);
}

std::string RenderOk(const std::string& source,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) {
  absl::StatusOr<std::string> out = RenderString(source, nlohmann::ordered_json::array(), extra);
  EXPECT_TRUE(out.ok()) << source << " -> " << out.status();
  return out.ok() ? *out : "<error>";
}

// Renders every case of one fixture family and compares with HF's output or error.
void CheckFamily(const std::string& family) {
  const fs::path dir = kFixtures / family;
  absl::StatusOr<std::string> source = ReadFileToString((dir / "template.jinja").string());
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::string> cases_text = ReadFileToString((dir / "cases.json").string());
  ASSERT_TRUE(cases_text.ok()) << cases_text.status();
  nlohmann::ordered_json fixture = nlohmann::ordered_json::parse(*cases_text);
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromString(
      *source, fixture["bos_token"].get<std::string>(), fixture["eos_token"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ASSERT_FALSE(fixture["cases"].empty());
  for (const auto& c : fixture["cases"]) {
    SCOPED_TRACE(family + " " + c["name"].get<std::string>());
    absl::StatusOr<std::string> out =
        tmpl->Render(c["messages"], c["add_generation_prompt"].get<bool>(), c["extra"]);
    if (c.contains("expected")) {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(*out, c["expected"].get<std::string>());
    } else {
      ASSERT_FALSE(out.ok()) << *out;
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(std::string(out.status().message()), c["error"].get<std::string>());
    }
  }
}

TEST(ChatTemplateFixtureTest, Qwen25) { CheckFamily("qwen2_5"); }
TEST(ChatTemplateFixtureTest, Qwen3) { CheckFamily("qwen3"); }
TEST(ChatTemplateFixtureTest, MistralInstruct) { CheckFamily("mistral_instruct"); }
TEST(ChatTemplateFixtureTest, MixtralInstruct) { CheckFamily("mixtral_instruct"); }
TEST(ChatTemplateFixtureTest, MistralTools) { CheckFamily("mistral_tools"); }
TEST(ChatTemplateFixtureTest, Llama3) { CheckFamily("llama3"); }
TEST(ChatTemplateFixtureTest, Llama31) { CheckFamily("llama3_1"); }
TEST(ChatTemplateFixtureTest, JinjaFeatures) { CheckFamily("features"); }
TEST(ChatTemplateFixtureTest, JinjaFeatures2) { CheckFamily("features2"); }
TEST(ChatTemplateFixtureTest, Whitespace) { CheckFamily("whitespace"); }

TEST(ChatTemplateFixtureTest, EveryFixtureFamilyIsChecked) {
  int families = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures)) families += entry.is_directory();
  EXPECT_EQ(families, 10);
}

// Every prefix of every fixture template either renders or fails with InvalidArgument.
TEST(ChatTemplateErrorTest, TruncatedTemplatesFailCleanly) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])");
  int failures = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    absl::StatusOr<std::string> source =
        ReadFileToString((entry.path() / "template.jinja").string());
    ASSERT_TRUE(source.ok()) << source.status();
    for (size_t len = 0; len <= source->size(); ++len) {
      absl::StatusOr<std::string> out = RenderString(source->substr(0, len), messages);
      if (out.ok()) continue;
      ++failures;
      ASSERT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument)
          << entry.path() << " prefix " << len << ": " << out.status();
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(ChatTemplateErrorTest, SyntaxErrorNamesLineAndColumn) {
  absl::StatusOr<std::string> out = RenderString("hello\n{% if true %}\n  {{ 'a' + }}{% endif %}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), StartsWith("chat template line 3 column 12: "));
}

TEST(ChatTemplateErrorTest, UnclosedBlocksAndTags) {
  absl::StatusOr<std::string> out = RenderString("{% for m in messages %}x");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("expected 'endfor'"));
  out = RenderString("ab{{ x ");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("line 1 column 3: unclosed tag"));
  out = RenderString("{% frobnicate %}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("unknown tag 'frobnicate'"));
}

TEST(ChatTemplateErrorTest, RaiseExceptionReturnsItsMessage) {
  absl::StatusOr<std::string> out =
      RenderString("ok{{ raise_exception('roles must alternate: ' ~ 3) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(out.status().message()), "roles must alternate: 3");
}

TEST(ChatTemplateErrorTest, UndefinedBehavesLikeJinjaDefaultUndefined) {
  EXPECT_EQ(RenderOk("[{{ nothing }}]{% if nothing %}yes{% else %}no{% endif %}"), "[]no");
  EXPECT_EQ(RenderOk("{{ nothing | length }}{% for x in nothing %}x{% endfor %}"), "0");
  EXPECT_EQ(RenderOk("[{{ d.missing }}]", {{"d", {{"a", 1}}}}), "[]");
  absl::StatusOr<std::string> out = RenderString("\n  {{ nothing.attr }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(out.status().message()),
            "chat template line 2 column 13: 'nothing' is undefined");
  out =
      RenderString("{{ d.missing.deeper }}", nlohmann::ordered_json::array(), {{"d", {{"a", 1}}}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("has no attribute 'missing'"));
}

TEST(ChatTemplateErrorTest, UnknownFunctionAndFilter) {
  absl::StatusOr<std::string> out = RenderString("{{ no_such_fn(1) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("line 1 column 4: 'no_such_fn' is undefined"));
  out = RenderString("{{ 'a' | frob }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("no filter named 'frob'"));
  out = RenderString("{{ 1 + 'a' }}");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("unsupported operand"));
}

TEST(ChatTemplateErrorTest, ArithmeticLimitsAreErrorsNotCrashes) {
  for (const char* source : {"{{ 9223372036854775807 + 1 }}", "{{ 3 ** 100 }}", "{{ 1 // 0 }}",
                             "{{ 'ab' * 100000000000 }}", "{{ [1] * 100000000000 }}"}) {
    absl::StatusOr<std::string> out = RenderString(source);
    ASSERT_FALSE(out.ok()) << source;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << source;
  }
  EXPECT_EQ(RenderOk("{{ 1 ** 1000000000000 }} {{ (-1) ** 3 }} {{ 2 ** -1 }}"), "1 -1 0.5");
}

TEST(ChatTemplateSemanticsTest, ScopingOfSetInLoopsAndNamespaces) {
  EXPECT_EQ(RenderOk("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"),
            "1");
  EXPECT_EQ(RenderOk("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}"
                     "{% endfor %}{{ ns.x }}"),
            "2");
  EXPECT_EQ(RenderOk("{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}"), "in-if");
}

TEST(ChatTemplateSemanticsTest, NewlinesAreNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(RenderOk("a\r\nb\rc\n\n"), "a\nb\nc\n");
  EXPECT_EQ(RenderOk("{{ 'x' }}\n"), "x");
  EXPECT_EQ(RenderOk("{{ strftime_now('%Y') | length }}"), "4");
}

TEST(ChatTemplateSemanticsTest, PythonValueSemantics) {
  EXPECT_EQ(RenderOk("{{ 'héllo wörld'[1:4] }}|{{ '日本語' | length }}|{{ '日本語'[::-1] }}"),
            "éll|3|語本日");
  EXPECT_EQ(RenderOk("{{ 1e20 }} {{ 0.0001 }} {{ 1.5e-7 }} {{ 10 / 4 }} {{ -7 // 2 }}"),
            "1e+20 0.0001 1.5e-07 2.5 -4");
  EXPECT_EQ(RenderOk("{{ {'a': 'é\\n', 'b': [1.0, none]} | tojson(indent=2) }}"),
            "{\n  \"a\": \"é\\n\",\n  \"b\": [\n    1.0,\n    null\n  ]\n}");
  EXPECT_EQ(RenderOk("{{ \"it's\" }} {{ [\"it's\", 'q\"'] }}"), "it's [\"it's\", 'q\"']");
}

TEST(ChatTemplateTest, JsonOverloadAndReasoningAlias) {
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromString(
      "{% for m in messages %}{{ m.role }}:{{ m.thinking }}/{{ m.reasoning_content }};"
      "{% endfor %}{{ add_generation_prompt }}",
      "", "");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  nlohmann::json messages = {{{"role", "assistant"}, {"reasoning", "r1"}},
                             {{"role", "user"}, {"content", "hi"}}};
  absl::StatusOr<std::string> out = tmpl->Render(messages, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "assistant:r1/r1;user:/;True");
  EXPECT_FALSE(tmpl->Render(nlohmann::json::object(), false).ok());
}

class ChatTemplateModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("chat_template_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(ChatTemplateModelDirTest, ReadsTemplateAndSpecialTokensFromTokenizerConfig) {
  nlohmann::json config = {
      {"bos_token", {{"content", "<B>"}, {"lstrip", false}}},
      {"eos_token", "<E>"},
      {"chat_template", "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}};
  Write("tokenizer_config.json", config.dump());
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromModelDir(dir_.string());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  absl::StatusOr<std::string> out =
      tmpl->Render(nlohmann::json::array({{{"role", "user"}, {"content", "x"}}}), false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<B>x<E>");
}

TEST_F(ChatTemplateModelDirTest, NamedTemplatesAndJinjaFile) {
  nlohmann::json config = {
      {"chat_template",
       {{{"name", "default"}, {"template", "D"}}, {{"name", "tool_use"}, {"template", "T"}}}}};
  Write("tokenizer_config.json", config.dump());
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::FromModelDir(dir_.string());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->source(), "D");
  tmpl = ChatTemplate::FromModelDir(dir_.string(), "tool_use");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->source(), "T");
  EXPECT_EQ(ChatTemplate::FromModelDir(dir_.string(), "nope").status().code(),
            absl::StatusCode::kNotFound);
  Write("chat_template.jinja", "J");
  tmpl = ChatTemplate::FromModelDir(dir_.string());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->source(), "J");
}

TEST_F(ChatTemplateModelDirTest, MissingTemplateIsNotFound) {
  Write("tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
  EXPECT_EQ(ChatTemplate::FromModelDir(dir_.string()).status().code(), absl::StatusCode::kNotFound);
  Write("tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}");
  EXPECT_EQ(ChatTemplate::FromModelDir(dir_.string()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
