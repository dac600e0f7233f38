// Tool-call output parsers: each family's format, text outside calls, malformed calls kept as
// content, the bounds, and streaming: every split of the output into two or three pieces gives
// the same content and calls as the whole output at once.
#include "strata/openai/tool_calls.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/grammar/grammar.h"

namespace strata::openai {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

auto Call(const std::string& name, const std::string& arguments) {
  return ::testing::AllOf(Field(&ToolCall::name, name), Field(&ToolCall::arguments, arguments));
}

// Feeds `text` split at the given offsets (ascending), then Finish().
ToolCallOutput Streamed(ToolCallParser parser, const std::string& text, std::vector<size_t> cuts) {
  ToolCallStreamParser stream(parser);
  ToolCallOutput all;
  size_t from = 0;
  cuts.push_back(text.size());
  for (size_t cut : cuts) {
    ToolCallOutput part = stream.Feed(std::string_view(text).substr(from, cut - from));
    all.content += part.content;
    for (ToolCall& c : part.calls) all.calls.push_back(std::move(c));
    from = cut;
  }
  ToolCallOutput rest = stream.Finish();
  all.content += rest.content;
  for (ToolCall& c : rest.calls) all.calls.push_back(std::move(c));
  return all;
}

std::vector<std::string> Names(const std::vector<ToolCall>& calls) {
  std::vector<std::string> out;
  for (const ToolCall& c : calls) out.push_back(c.name + " " + c.arguments);
  return out;
}

// Every split into two pieces, and into three around every pair of offsets for short texts,
// gives what the whole text gives.
void ExpectSplitInvariant(ToolCallParser parser, const std::string& text) {
  const ToolCallOutput whole = ParseToolCalls(parser, text);
  for (size_t i = 0; i <= text.size(); ++i) {
    const ToolCallOutput split = Streamed(parser, text, {i});
    ASSERT_EQ(split.content, whole.content) << "split at " << i << " of: " << text;
    ASSERT_EQ(Names(split.calls), Names(whole.calls)) << "split at " << i << " of: " << text;
  }
  if (text.size() > 120) return;
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const ToolCallOutput split = Streamed(parser, text, {i, j});
      ASSERT_EQ(split.content, whole.content) << "splits " << i << "," << j << ": " << text;
      ASSERT_EQ(Names(split.calls), Names(whole.calls)) << "splits " << i << "," << j;
    }
  }
  // One byte at a time.
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  const ToolCallOutput bytes = Streamed(parser, text, every);
  EXPECT_EQ(bytes.content, whole.content);
  EXPECT_EQ(Names(bytes.calls), Names(whole.calls));
}

TEST(ToolCallParserTest, HermesBlocksWithTextBeforeAndBetween) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"n\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
      "{}}\n</tool_call>";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kHermes, text);
  EXPECT_EQ(out.content, "Let me check.\n");
  EXPECT_THAT(out.calls, ElementsAre(Call("get_weather", R"({"city":"Paris","n":2})"),
                                     Call("get_time", "{}")));
  for (const ToolCall& c : out.calls) EXPECT_TRUE(c.id.empty());
  ExpectSplitInvariant(ToolCallParser::kHermes, text);
}

TEST(ToolCallParserTest, HermesKeepsArgumentKeyOrderAndUnicode) {
  ToolCallOutput out = ParseToolCalls(
      ToolCallParser::kHermes,
      "<tool_call>{\"name\":\"f\",\"arguments\":{\"z\":1,\"a\":\"日本 \\\"q\\\"\"}}</tool_call>");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("f", R"({"z":1,"a":"日本 \"q\""})")));
}

TEST(ToolCallParserTest, HermesTextAfterTheCallsIsContent) {
  const std::string text =
      "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\n\nDone, see above.";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kHermes, text);
  EXPECT_EQ(out.content, "\n\nDone, see above.");
  EXPECT_THAT(out.calls, ElementsAre(Call("f", "{}")));
  ExpectSplitInvariant(ToolCallParser::kHermes, text);
}

TEST(ToolCallParserTest, HermesUnclosedCallAtTheEndCountsWhenWhole) {
  EXPECT_THAT(ParseToolCalls(ToolCallParser::kHermes,
                             "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":[1]}}\n")
                  .calls,
              ElementsAre(Call("f", R"({"x":[1]})")));
  const std::string cut = "Hi <tool_call>\n{\"name\":\"f\",\"argum";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kHermes, cut);
  EXPECT_EQ(out.content, cut);
  EXPECT_TRUE(out.calls.empty());
  ExpectSplitInvariant(ToolCallParser::kHermes, cut);
}

TEST(ToolCallParserTest, MalformedCallsStayContent) {
  const std::vector<std::string> texts = {
      "<tool_call>not json</tool_call> and text",
      "<tool_call>{\"arguments\":{}}</tool_call>",                  // no name
      "<tool_call>{\"name\":\"\",\"arguments\":{}}</tool_call>",    // empty name
      "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>",  // arguments not an object
      "<tool_call>[{\"name\":\"f\"}]</tool_call>",                  // not an object
      "a <tool_call>{\"name\":\"f\"}</tool_call",                   // unclosed, broken end
      "<tool_call><tool_call>{\"name\":\"f\"}</tool_call>",         // nested opening
  };
  for (const std::string& text : texts) {
    ToolCallOutput out = ParseToolCalls(ToolCallParser::kHermes, text);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.calls.empty()) << text;
    ExpectSplitInvariant(ToolCallParser::kHermes, text);
  }
  // A bad block between good ones stays in the content, in place.
  const std::string mixed =
      "<tool_call>{\"name\":\"a\"}</tool_call>x<tool_call>oops</tool_call><tool_call>{\"name\":"
      "\"b\"}</tool_call>";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kHermes, mixed);
  EXPECT_EQ(out.content, "x<tool_call>oops</tool_call>");
  EXPECT_THAT(out.calls, ElementsAre(Call("a", "{}"), Call("b", "{}")));
  ExpectSplitInvariant(ToolCallParser::kHermes, mixed);
}

TEST(ToolCallParserTest, TextWithoutCallsIsUnchanged) {
  for (ToolCallParser p : {ToolCallParser::kHermes, ToolCallParser::kMistral,
                           ToolCallParser::kLlama3Json, ToolCallParser::kNone}) {
    for (const std::string& text :
         {std::string("Hello there <tool_ and [TOOL_ and <|python_"), std::string("  \n "),
          std::string(""), std::string(" plain { text }"), std::string("<tool_call")}) {
      ToolCallOutput out = ParseToolCalls(p, text);
      EXPECT_EQ(out.content, text) << ToolCallParserName(p);
      EXPECT_TRUE(out.calls.empty());
      ExpectSplitInvariant(p, text);
    }
  }
}

TEST(ToolCallParserTest, NoneParserPassesCallsThrough) {
  const std::string text = "<tool_call>{\"name\":\"f\"}</tool_call>";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kNone, text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());
}

TEST(ToolCallParserTest, Llama3JsonWithAndWithoutPythonTag) {
  const std::string plain = " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kLlama3Json, plain);
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("get_weather", R"({"city":"Paris"})")));
  ExpectSplitInvariant(ToolCallParser::kLlama3Json, plain);

  const std::string tagged =
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"}{;\"}}; {\"name\": \"b\", "
      "\"arguments\": {}}";
  out = ParseToolCalls(ToolCallParser::kLlama3Json, tagged);
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("a", R"({"s":"}{;"})"), Call("b", "{}")));
  ExpectSplitInvariant(ToolCallParser::kLlama3Json, tagged);
}

TEST(ToolCallParserTest, Llama3CallsOnlyAtTheStart) {
  const std::string text = "Sure: {\"name\": \"f\", \"parameters\": {}}";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kLlama3Json, text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());
  ExpectSplitInvariant(ToolCallParser::kLlama3Json, text);
  // JSON that is not a call, and a call followed by text, stay content.
  for (const std::string& t : {std::string("{\"answer\": 42}"),
                               std::string("{\"name\": \"f\", \"parameters\": {}} trailing"),
                               std::string("<|python_tag|>print(1)")}) {
    out = ParseToolCalls(ToolCallParser::kLlama3Json, t);
    EXPECT_EQ(out.content, t);
    EXPECT_TRUE(out.calls.empty());
    ExpectSplitInvariant(ToolCallParser::kLlama3Json, t);
  }
}

TEST(ToolCallParserTest, MistralToolCallsArray) {
  const std::string text =
      "I will call two.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kMistral, text);
  EXPECT_EQ(out.content, "I will call two.");
  EXPECT_THAT(out.calls, ElementsAre(Call("get_weather", R"({"city":"Paris"})"),
                                     Call("get_time", R"({"tz":"CET"})")));
  ExpectSplitInvariant(ToolCallParser::kMistral, text);
  const std::string bad = "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}, 7]";
  out = ParseToolCalls(ToolCallParser::kMistral, bad);
  EXPECT_EQ(out.content, bad);
  EXPECT_TRUE(out.calls.empty());
  ExpectSplitInvariant(ToolCallParser::kMistral, bad);
}

TEST(ToolCallParserTest, MistralNamedForm) {
  const std::string text =
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}";
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kMistral, text);
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls,
              ElementsAre(Call("get_weather", R"({"city":"Paris"})"), Call("get_time", "{}")));
  ExpectSplitInvariant(ToolCallParser::kMistral, text);
  for (const std::string bad :
       {"[TOOL_CALLS]get_weather{}", "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS][ARGS]{}",
        "[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g", "[TOOL_CALLS]f[ARGS]{oops"}) {
    out = ParseToolCalls(ToolCallParser::kMistral, bad);
    EXPECT_EQ(out.content, bad);
    EXPECT_TRUE(out.calls.empty()) << bad;
  }
}

TEST(ToolCallParserTest, ArgumentsGivenAsAStringAreKept) {
  ToolCallOutput out = ParseToolCalls(
      ToolCallParser::kMistral, "[TOOL_CALLS][{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}]");
  EXPECT_THAT(out.calls, ElementsAre(Call("f", R"({"a":1})")));
}

TEST(ToolCallParserTest, OversizedCallStaysContentAndEndsParsing) {
  const std::string big(kMaxToolCallBytes + 10, 'x');
  const std::string text = "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"" + big +
                           "\"}}</tool_call><tool_call>{\"name\":\"g\"}</tool_call>";
  ToolCallOutput whole = ParseToolCalls(ToolCallParser::kHermes, text);
  EXPECT_EQ(whole.content, text);
  EXPECT_TRUE(whole.calls.empty());
  // Streamed in 1 KiB pieces: the parser stops holding back once the bound is passed.
  ToolCallStreamParser stream(ToolCallParser::kHermes);
  std::string content;
  size_t held_max = 0, fed = 0;
  for (size_t i = 0; i < text.size(); i += 1024) {
    ToolCallOutput part = stream.Feed(std::string_view(text).substr(i, 1024));
    EXPECT_TRUE(part.calls.empty());
    content += part.content;
    fed = std::min(text.size(), i + 1024);
    held_max = std::max(held_max, fed - content.size());
  }
  content += stream.Finish().content;
  EXPECT_EQ(content, text);
  EXPECT_LE(held_max, kMaxToolCallBytes + 2048);
}

TEST(ToolCallParserTest, HeldWhitespaceIsBounded) {
  const std::string ws(kMaxToolCallBytes + 5, ' ');
  for (ToolCallParser p : {ToolCallParser::kHermes, ToolCallParser::kLlama3Json}) {
    const std::string call = p == ToolCallParser::kHermes
                                 ? "<tool_call>{\"name\":\"f\"}</tool_call>"
                                 : "{\"name\":\"f\"}";
    ToolCallOutput whole = ParseToolCalls(p, ws + call);
    // Hermes still finds the call after the whitespace (which is then content); Llama 3 calls
    // must start the output, and this one starts too late.
    EXPECT_EQ(whole.content, p == ToolCallParser::kHermes ? ws : ws + call);
    EXPECT_EQ(whole.calls.size(), p == ToolCallParser::kHermes ? 1u : 0u);
    ToolCallStreamParser stream(p);
    ToolCallOutput streamed;
    size_t held_max = 0, fed = 0;
    const std::string text = ws + call;
    for (size_t i = 0; i < text.size(); i += 4096) {
      ToolCallOutput part = stream.Feed(std::string_view(text).substr(i, 4096));
      streamed.content += part.content;
      for (ToolCall& c : part.calls) streamed.calls.push_back(std::move(c));
      fed = std::min(text.size(), i + 4096);
      held_max = std::max(held_max, fed - streamed.content.size());
    }
    ToolCallOutput rest = stream.Finish();
    streamed.content += rest.content;
    EXPECT_EQ(streamed.content, whole.content);
    EXPECT_EQ(streamed.calls.size(), whole.calls.size());
    EXPECT_LE(held_max, kMaxToolCallBytes + 4096);
  }
}

TEST(ToolCallParserTest, DeepArgumentsStayContent) {
  std::string deep = "{\"name\":\"f\",\"arguments\":";
  for (int i = 0; i < kMaxToolCallJsonDepth + 5; ++i) deep += "[";
  for (int i = 0; i < kMaxToolCallJsonDepth + 5; ++i) deep += "]";
  deep += "}";
  for (ToolCallParser p :
       {ToolCallParser::kHermes, ToolCallParser::kLlama3Json, ToolCallParser::kMistral}) {
    std::string text = p == ToolCallParser::kHermes    ? "<tool_call>" + deep + "</tool_call>"
                       : p == ToolCallParser::kMistral ? "[TOOL_CALLS][" + deep + "]"
                                                       : deep;
    ToolCallOutput out = ParseToolCalls(p, text);
    EXPECT_EQ(out.content, text) << ToolCallParserName(p);
    EXPECT_TRUE(out.calls.empty());
  }
}

TEST(ToolCallParserTest, CallsPerOutputAreBounded) {
  const std::string block = "<tool_call>{\"name\":\"f\"}</tool_call>";
  std::string text, beyond;
  for (int i = 0; i < kMaxToolCallsPerOutput + 3; ++i) {
    text += block;
    if (i >= kMaxToolCallsPerOutput) beyond += block;
  }
  ToolCallOutput out = ParseToolCalls(ToolCallParser::kHermes, text);
  EXPECT_EQ(out.calls.size(), static_cast<size_t>(kMaxToolCallsPerOutput));
  EXPECT_EQ(out.content, beyond);
}

TEST(ToolCallParserTest, NamesAndDetection) {
  for (ToolCallParser p :
       {ToolCallParser::kAuto, ToolCallParser::kNone, ToolCallParser::kLlama3Json,
        ToolCallParser::kHermes, ToolCallParser::kMistral}) {
    ToolCallParser back = ToolCallParser::kAuto;
    ASSERT_TRUE(ParseToolCallParser(ToolCallParserName(p), &back).ok());
    EXPECT_EQ(back, p);
  }
  ToolCallParser out;
  EXPECT_FALSE(ParseToolCallParser("qwen", &out).ok());
  EXPECT_EQ(DetectToolCallParser("{{ '<tool_call>' }}"), ToolCallParser::kHermes);
  EXPECT_EQ(DetectToolCallParser("[TOOL_CALLS] [AVAILABLE_TOOLS]"), ToolCallParser::kMistral);
  EXPECT_EQ(DetectToolCallParser("<|python_tag|>"), ToolCallParser::kLlama3Json);
  EXPECT_EQ(DetectToolCallParser("{% if tools %}<|start_header_id|>"), ToolCallParser::kLlama3Json);
  EXPECT_EQ(DetectToolCallParser("<|im_start|>{{ m.content }}"), ToolCallParser::kNone);
}

TEST(ToolCallParserTest, IdsAreFreshAndShapedPerFamily) {
  const std::string a = NewToolCallId(ToolCallParser::kHermes);
  const std::string b = NewToolCallId(ToolCallParser::kHermes);
  EXPECT_NE(a, b);
  EXPECT_THAT(a, ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));
  EXPECT_THAT(NewToolCallId(ToolCallParser::kMistral), ::testing::MatchesRegex("[A-Za-z0-9]{9}"));
}

// --- tool_choice "required" / a named function: the output constraint -----------------------

ToolsSpec WeatherAndTime(ToolChoice choice, bool parallel) {
  ToolsSpec t;
  t.tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 12},
                     "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
      "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time"}}])");
  t.choice = choice;
  t.function_name = choice == ToolChoice::kFunction ? "get_weather" : "";
  t.parallel_tool_calls = parallel;
  return t;
}

// Random walks through the constraint's automaton (a byte drawn among those that keep it alive,
// stopping where it may end, at random once it can): each finished output.
std::vector<std::string> Walks(const grammar::Grammar& g, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string text;
    int32_t state = g.start();
    while (!(g.IsAccepting(state) && (!g.CanContinue(state) || rng() % 4 == 0))) {
      std::vector<uint8_t> alive;
      for (int b = 0; b < 256; ++b) {
        if (g.Next(state, static_cast<uint8_t>(b)) != grammar::Grammar::kDead) alive.push_back(b);
      }
      if (alive.empty() || text.size() > 4000) break;
      const uint8_t b = alive[rng() % alive.size()];
      text.push_back(static_cast<char>(b));
      state = g.Next(state, b);
    }
    out.push_back(text);
  }
  return out;
}

TEST(ToolCallConstraintTest, EveryOutputOfTheConstraintParsesIntoAllowedCalls) {
  for (ToolCallParser parser :
       {ToolCallParser::kLlama3Json, ToolCallParser::kHermes, ToolCallParser::kMistral}) {
    for (ToolChoice choice : {ToolChoice::kRequired, ToolChoice::kFunction}) {
      for (bool parallel : {false, true}) {
        SCOPED_TRACE(absl::StrCat(std::string(ToolCallParserName(parser)), " choice ", int(choice),
                                  parallel ? " parallel" : ""));
        auto g = ToolCallConstraint(WeatherAndTime(choice, parallel), parser);
        ASSERT_TRUE(g.ok()) << g.status();
        EXPECT_EQ(g->kind, GuidedDecoding::Kind::kToolCalls);
        auto compiled = grammar::Grammar::Compile(*g);
        ASSERT_TRUE(compiled.ok()) << compiled.status();
        size_t most_calls = 0;
        std::set<std::string> names;
        for (const std::string& text : Walks(**compiled, 60, 7)) {
          SCOPED_TRACE(text);
          const ToolCallOutput parsed = ParseToolCalls(parser, text);
          ASSERT_FALSE(parsed.calls.empty());
          EXPECT_EQ(parsed.content, "");
          most_calls = std::max(most_calls, parsed.calls.size());
          for (const ToolCall& c : parsed.calls) {
            names.insert(c.name);
            const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
            ASSERT_TRUE(args.is_object());
            if (c.name == "get_weather") {
              ASSERT_EQ(args.size(), 2u);
              ASSERT_TRUE(args["city"].is_string());
              const std::string city = args["city"].get<std::string>();  // maxLength: code points
              EXPECT_LE(std::count_if(city.begin(), city.end(),
                                      [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }),
                        12);
              EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f");
            } else {
              EXPECT_EQ(c.name, "get_time");
            }
          }
        }
        const int max_calls = nlohmann::json::parse(g->spec)["max_calls"].get<int>();
        EXPECT_LE(int(most_calls), max_calls);
        if (!parallel) EXPECT_EQ(max_calls, 1);
        if (max_calls > 1) EXPECT_GT(most_calls, 1u);
        // One function's calls fit four to an automaton; both functions' at least two.
        if (parallel) EXPECT_GE(max_calls, choice == ToolChoice::kFunction ? 4 : 2);
        if (choice == ToolChoice::kFunction) {
          EXPECT_EQ(names, std::set<std::string>{"get_weather"});
        } else {
          EXPECT_EQ(names, (std::set<std::string>{"get_time", "get_weather"}));
        }
      }
    }
  }
}

TEST(ToolCallConstraintTest, TextOutsideTheCallSyntaxIsRefused) {
  auto g = ToolCallConstraint(WeatherAndTime(ToolChoice::kRequired, false), ToolCallParser::kHermes);
  ASSERT_TRUE(g.ok()) << g.status();
  auto compiled = grammar::Grammar::Compile(*g);
  ASSERT_TRUE(compiled.ok());
  const grammar::Grammar& gr = **compiled;
  EXPECT_EQ(gr.Advance(gr.start(), "Sure, "), grammar::Grammar::kDead);
  EXPECT_EQ(gr.Advance(gr.start(), R"(<tool_call>
{"name":"get_weather","arguments":{"city":"Oslo","unit":"k"})"), grammar::Grammar::kDead);
  const int32_t ok = gr.Advance(gr.start(), R"(<tool_call>
{"name":"get_weather","arguments":{"city":"Oslo","unit":"c"}}
</tool_call>)");
  ASSERT_NE(ok, grammar::Grammar::kDead);
  EXPECT_TRUE(gr.IsAccepting(ok));
}

TEST(ToolCallConstraintTest, AParametersSchemaTheGrammarCannotTakeIsRefused) {
  ToolsSpec t = WeatherAndTime(ToolChoice::kRequired, true);
  t.tools[0]["function"]["parameters"]["properties"]["city"]["multipleOf"] = 3;
  auto g = ToolCallConstraint(t, ToolCallParser::kHermes);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), ::testing::HasSubstr("multipleOf"));
}

}  // namespace
}  // namespace strata::openai
