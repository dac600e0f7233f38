// The structured-output compilers (JSON schema, json_object, regex, choice), the automaton's
// guarantees (always completable, EOS exactly where accepting), and the token masks (trie walk
// equal to brute force over the vocabulary).
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "strata/grammar/grammar.h"
#include "strata/grammar/token_mask.h"
#include "strata/text/tokenizer.h"

namespace strata::grammar {
namespace {

std::shared_ptr<const Grammar> MustCompile(GuidedDecoding::Kind kind, std::string spec) {
  auto g = Grammar::Compile({kind, std::move(spec)});
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

bool Matches(const Grammar& g, std::string_view text) {
  const int32_t s = g.Advance(g.start(), text);
  return s != Grammar::kDead && g.IsAccepting(s);
}

// Properties are generated in their declared order: ordered_json keeps it.
std::shared_ptr<const Grammar> Schema(const nlohmann::ordered_json& schema) {
  return MustCompile(GuidedDecoding::Kind::kJsonSchema, schema.dump());
}

absl::Status CompileError(GuidedDecoding::Kind kind, std::string spec) {
  return Grammar::Compile({kind, std::move(spec)}).status();
}

TEST(RegexTest, AcceptsExactlyItsLanguage) {
  auto g = MustCompile(GuidedDecoding::Kind::kRegex, R"(^(ab|c)+\d{2,3}[x-z]?$)");
  for (const char* yes : {"ab12", "cab123", "cc00z", "abab999x"}) EXPECT_TRUE(Matches(*g, yes)) << yes;
  for (const char* no : {"", "ab1", "ab1234", "abc12w", "x12", "ab12zz"}) {
    EXPECT_FALSE(Matches(*g, no)) << no;
  }
}

TEST(RegexTest, ClassesEscapesAndUnicode) {
  auto g = MustCompile(GuidedDecoding::Kind::kRegex, R"([^a-c\s]\w\.é.{1}\u00e9)");
  EXPECT_TRUE(Matches(*g, "d_.éxé"));
  EXPECT_TRUE(Matches(*g, "Z9.é日é"));  // `.` takes a whole multi-byte character
  EXPECT_FALSE(Matches(*g, "a_.éxé"));
  EXPECT_FALSE(Matches(*g, " _.éxé"));
  EXPECT_FALSE(Matches(*g, "d_xéxé"));
  EXPECT_FALSE(Matches(*g, "d_.é\né"));
}

TEST(RegexTest, RefusesUnsupportedSyntaxWithOffset) {
  for (const char* bad : {"(a", "a)", "a**", "*a", "(?=a)", "\\1", "\\b", "a{3,2}", "[z-a]",
                          "a{100000}", "a^b", "[[:alpha:]]", "\\"}) {
    absl::Status s = CompileError(GuidedDecoding::Kind::kRegex, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("regex"), std::string_view::npos) << s.message();
  }
}

TEST(RegexTest, StateLimitIsAnError) {
  absl::Status s = CompileError(GuidedDecoding::Kind::kRegex, "((((a{200}){200}){200}){200})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("too large"), std::string_view::npos) << s.message();
}

TEST(ChoiceTest, OneOfTheStrings) {
  auto g = MustCompile(GuidedDecoding::Kind::kChoice, R"(["yes","no","not sure"])");
  EXPECT_TRUE(Matches(*g, "yes"));
  EXPECT_TRUE(Matches(*g, "not sure"));
  EXPECT_FALSE(Matches(*g, "not"));
  EXPECT_FALSE(Matches(*g, "yesno"));
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kChoice, "[]").ok());
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kChoice, "[1]").ok());
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kChoice, "{").ok());
}

TEST(EbnfTest, RulesAlternativesQuantifiersAndComments) {
  auto g = MustCompile(GuidedDecoding::Kind::kGrammar, R"(
    # a list of key-value pairs
    root ::= "{" pair ("," pair){0,2} "}"
    pair ::= key ":" value
    key  ::= [a-z]+
    value ::= "yes" | "no" | num
    num ::= "-"? [0-9]{1,3} ("." [0-9]+)?
  )");
  for (const char* yes : {"{a:yes}", "{ab:no,c:-12.5,d:7}"}) EXPECT_TRUE(Matches(*g, yes)) << yes;
  for (const char* no : {"{}", "{a:maybe}", "{a:1,b:2,c:3,d:4}", "{A:yes}", "{a:1234}"}) {
    EXPECT_FALSE(Matches(*g, no)) << no;
  }
}

TEST(EbnfTest, RecursionIsUnrolledToABoundedDepth) {
  auto g = MustCompile(GuidedDecoding::Kind::kGrammar,
                       "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\n"
                       "item ::= [0-9] | list");
  EXPECT_TRUE(Matches(*g, "[1,[2,[]],3]"));
  EXPECT_TRUE(Matches(*g, "[[[[]]]]"));         // root's list and 3 more: 4 levels
  EXPECT_FALSE(Matches(*g, "[[[[[]]]]]"));      // a fifth is past the unrolling
  EXPECT_FALSE(Matches(*g, "[1,]"));
}

TEST(EbnfTest, RefusesBadGrammars) {
  for (const char* bad : {"", "start: \"a\"", "root ::= missing", "root ::= \"a",
                          "root ::= (\"a\"", "root ::= \"a\"\nroot ::= \"b\"",
                          "root ::= [a-", "root ::= root \"a\"", "root ::= @"}) {
    absl::Status s = CompileError(GuidedDecoding::Kind::kGrammar, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(JsonSchemaTest, ObjectWithRequiredAndOptionalProperties) {
  auto g = Schema({{"type", "object"},
                   {"properties",
                    {{"a", {{"type", "integer"}}},
                     {"b", {{"type", "string"}}},
                     {"c", {{"type", "boolean"}}}}},
                   {"required", {"b"}}});
  for (const char* yes : {R"({"b":"x"})", R"({"a":-12,"b":""})", R"({"b":"q","c":true})",
                          R"({ "a": 0, "b": "\u00e9\n", "c": false })"}) {
    EXPECT_TRUE(Matches(*g, yes)) << yes;
  }
  for (const char* no : {R"({})", R"({"a":1})", R"({"b":"x",})", R"({"b":"x","b":"y"})",
                         R"({"c":true,"b":"x"})", R"({"b":"x"} )", R"({"a":01,"b":"x"})",
                         R"({"b":"x","d":1})", "{   \"b\":\"x\"}"}) {
    EXPECT_FALSE(Matches(*g, no)) << no;
  }
}

TEST(JsonSchemaTest, ArraysEnumsNestingAndRefs) {
  nlohmann::ordered_json schema = nlohmann::ordered_json::parse(R"({
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"},
              "y": {"type": "number"}}, "required": ["x", "y"], "additionalProperties": false}},
    "type": "object",
    "properties": {
      "color": {"enum": ["red", "green", 3, null]},
      "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1,
                 "maxItems": 2},
      "tag": {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]},
      "when": {"type": "string", "format": "date"},
      "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}
    },
    "required": ["color", "points", "tag", "when", "id"]})");
  auto g = Schema(schema);
  EXPECT_TRUE(Matches(
      *g,
      R"({"color":"red","points":[{"x":1.5,"y":-2e3}],"tag":"ab","when":"2024-02-29","id":"AB-7"})"));
  EXPECT_TRUE(Matches(
      *g,
      R"({"color":null,"points":[{"x":1,"y":2}, {"x":0,"y":0}],"tag":null,"when":"1999-12-01","id":"ZZ-0"})"));
  EXPECT_FALSE(Matches(  // three points
      *g,
      R"({"color":3,"points":[{"x":1,"y":2},{"x":1,"y":2},{"x":1,"y":2}],"tag":null,"when":"1999-12-01","id":"ZZ-0"})"));
  EXPECT_FALSE(Matches(  // no points
      *g, R"({"color":3,"points":[],"tag":null,"when":"1999-12-01","id":"ZZ-0"})"));
  EXPECT_FALSE(Matches(  // tag too long
      *g, R"({"color":3,"points":[{"x":1,"y":2}],"tag":"abc","when":"1999-12-01","id":"ZZ-0"})"));
  EXPECT_FALSE(Matches(  // blue is not in the enum
      *g, R"({"color":"blue","points":[{"x":1,"y":2}],"tag":null,"when":"1999-12-01","id":"ZZ-0"})"));
  EXPECT_FALSE(Matches(  // month 13
      *g, R"({"color":3,"points":[{"x":1,"y":2}],"tag":null,"when":"1999-13-01","id":"ZZ-0"})"));
}

TEST(JsonSchemaTest, RefusesUnsupportedKeywordsByName) {
  absl::Status s = CompileError(GuidedDecoding::Kind::kJsonSchema,
                                R"({"type":"integer","minimum":0,"multipleOf":2})");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("minimum"), std::string_view::npos) << s.message();
  EXPECT_NE(s.message().find("multipleOf"), std::string_view::npos) << s.message();
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema, R"({"$ref":"#"})").ok());  // recursion
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema, R"({"$ref":"#/$defs/x"})").ok());
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema, "false").ok());
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema, "[1,").ok());
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema, R"({"type":"banana"})").ok());
  EXPECT_FALSE(
      CompileError(GuidedDecoding::Kind::kJsonSchema, R"({"type":"string","format":"email"})").ok());
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema,
                            R"({"type":"array","items":{"type":"integer"},"minItems":100000})")
                   .ok());
  std::string deep = "{\"type\":\"string\"}";
  for (int i = 0; i < 40; ++i) deep = "{\"type\":\"array\",\"items\":" + deep + "}";
  EXPECT_FALSE(CompileError(GuidedDecoding::Kind::kJsonSchema, deep).ok());
}

TEST(JsonObjectTest, AnyObjectCompactAndBoundedDepth) {
  auto g = MustCompile(GuidedDecoding::Kind::kJsonObject, "");
  EXPECT_TRUE(Matches(*g, "{}"));
  EXPECT_TRUE(Matches(*g, R"({"a":[1,2.5e-3,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(Matches(*g, "[]"));
  EXPECT_FALSE(Matches(*g, R"({"a":1,})"));
  EXPECT_FALSE(Matches(*g, R"({"a":[[[[[[1]]]]]]})"));  // deeper than json_object_depth
}

// Random walks through the automaton: every live state reaches acceptance, and a walk that
// stops in an accepting state is a JSON document.
TEST(GrammarTest, EveryStateCanFinish) {
  auto g = MustCompile(GuidedDecoding::Kind::kJsonObject, "");
  std::mt19937 rng(7);
  for (int walk = 0; walk < 200; ++walk) {
    int32_t s = g->start();
    std::string out;
    for (int step = 0; step < 4000; ++step) {
      if (g->IsAccepting(s) && (rng() % 8 == 0 || !g->CanContinue(s))) break;
      std::vector<uint8_t> live;
      for (int b = 0; b < 256; ++b) {
        if (g->Next(s, static_cast<uint8_t>(b)) != Grammar::kDead) live.push_back(b);
      }
      ASSERT_FALSE(live.empty()) << "a state with no way on: " << out;
      // Prefer closing brackets after a while, so walks end.
      uint8_t b = live[rng() % live.size()];
      for (uint8_t c : live) {
        if (step > 200 && (c == '}' || c == ']' || c == '"')) b = c;
      }
      out.push_back(static_cast<char>(b));
      s = g->Next(s, b);
    }
    if (!g->IsAccepting(s)) continue;
    EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << out;
  }
}

std::shared_ptr<const TokenVocabulary> RandomVocabulary(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> tokens;
  std::vector<bool> usable;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  const std::string alphabet = "{}[]\",:0123456789-.eE abcxyz\\ntrufalse";
  while (static_cast<int>(tokens.size()) < n) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < len; ++i) t.push_back(alphabet[rng() % alphabet.size()]);
    tokens.push_back(t);
  }
  tokens.push_back("");  // empty: never allowed
  for (size_t i = 0; i < tokens.size(); ++i) usable.push_back(i % 97 != 5);  // some "special"
  return TokenVocabulary::Create(tokens, usable);
}

TEST(TokenMaskTest, TrieWalkEqualsBruteForce) {
  auto vocab = RandomVocabulary(3000, 1);
  for (auto g : {MustCompile(GuidedDecoding::Kind::kJsonObject, ""),
                 MustCompile(GuidedDecoding::Kind::kRegex, "[a-c]+(,\\d{1,3})*"),
                 Schema({{"type", "object"},
                         {"properties", {{"k", {{"type", "array"}, {"items", {{"type", "number"}}}}}}},
                         {"required", {"k"}}})}) {
    for (int32_t s = 0; s < g->num_states(); ++s) {
      ASSERT_EQ(vocab->Walk(*g, s), vocab->BruteForce(*g, s)) << "state " << s;
    }
  }
}

TEST(TokenMaskTest, FixtureTokenizerMasksAndCache) {
  auto tok = Tokenizer::FromFile(std::string(STRATA_SOURCE_DIR) +
                                 "/tests/fixtures/tokenizers/qwen2/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<std::string> bytes;
  std::vector<bool> usable;
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    bytes.push_back((*tok)->TokenBytes(id));
    usable.push_back(!(*tok)->IsSpecial(id));
  }
  auto vocab = TokenVocabulary::Create(bytes, usable);
  MaskerCache cache(vocab);
  GuidedDecoding spec{GuidedDecoding::Kind::kJsonSchema,
                      R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})"};
  auto masker = cache.Get(spec);
  ASSERT_TRUE(masker.ok()) << masker.status();
  EXPECT_EQ(cache.Get(spec)->get(), masker->get());  // one compile per spec
  const Grammar& g = (*masker)->grammar();
  for (int32_t s = 0; s < g.num_states(); ++s) {
    auto mask = (*masker)->Mask(s);
    ASSERT_EQ(*mask, vocab->BruteForce(g, s));
    EXPECT_EQ((*masker)->Mask(s).get(), mask.get());  // cached
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (!usable[id]) EXPECT_FALSE(MaskHas(*mask, id));
    }
  }
  // At the start only tokens beginning with '{' (or a prefix of it) are allowed.
  auto start = (*masker)->Mask(g.start());
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (MaskHas(*start, id)) EXPECT_EQ(bytes[id][0], '{') << bytes[id];
  }
}

}  // namespace
}  // namespace strata::grammar
