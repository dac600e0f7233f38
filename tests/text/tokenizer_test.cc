// Tokenizer tests: golden comparisons with Hugging Face `tokenizers` (fixtures made by
// scripts/fixtures/make_tokenizer_fixtures.py), streaming detokenization, load errors, and the
// deterministic BPE trainer.
#include "strata/text/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"

namespace strata {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

const std::string kFixtures = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/tokenizers/";
const std::vector<std::string> kTrainSpecials = {"<|begin_of_text|>", "<|end_of_text|>",
                                                 "<|im_start|>", "<|im_end|>"};
constexpr int kTrainVocab = 600;

std::string ReadOrDie(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(path);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// Strict UTF-8 validity (no overlongs, surrogates or values past U+10FFFF).
bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char b = s[i];
    int n = b < 0x80                 ? 1
            : b >= 0xC2 && b <= 0xDF ? 2
            : b >= 0xE0 && b <= 0xEF ? 3
            : b >= 0xF0 && b <= 0xF4 ? 4
                                     : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    unsigned char b1 = n > 1 ? s[i + 1] : 0;
    if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F) || (b == 0xF0 && b1 < 0x90) ||
        (b == 0xF4 && b1 > 0x8F)) {
      return false;
    }
    i += n;
  }
  return true;
}

// Streams `ids` through a StreamDecoder, checking every chunk is valid UTF-8.
std::string StreamAll(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  StreamDecoder decoder(&tok, skip);
  std::string text;
  for (int32_t id : ids) {
    std::string chunk = decoder.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "broken UTF-8 pushed for id " << id;
    text += chunk;
  }
  std::string tail = decoder.Flush();
  EXPECT_TRUE(IsValidUtf8(tail));
  return text + tail;
}

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// Checks `actual` against a recorded decode; null records a decode `tokenizers` panics on (its
// Strip decoder on a text shorter than its stop count), where any text will do.
void ExpectDecode(const std::string& actual, const json& recorded) {
  if (!recorded.is_null()) EXPECT_EQ(actual, recorded.get<std::string>());
}

// ---------------------------------------------------------------------------------------------
// Golden: every fixture entry must match `tokenizers` token for token.

class GoldenTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = kFixtures + GetParam() + "/";
    cases_ = json::parse(ReadOrDie(dir + "cases.json"), nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(cases_.is_object()) << "bad or missing " << dir << "cases.json";
    tok_ = LoadOrDie(dir + cases_["tokenizer"].get<std::string>());
    ASSERT_NE(tok_, nullptr);
  }
  json cases_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(GoldenTokenizerTest, VocabSizeMatches) {
  EXPECT_EQ(tok_->vocab_size(), cases_["vocab_size"].get<int32_t>());
}

TEST_P(GoldenTokenizerTest, EncodeMatchesHuggingFace) {
  ASSERT_GE(cases_["encode"].size(), 40u);
  for (const json& c : cases_["encode"]) {
    const std::string text = c["text"];
    SCOPED_TRACE("text: \"" + text.substr(0, 80) + "\"");
    EXPECT_EQ(tok_->Encode(text, false), Ids(c["ids"]));
    EXPECT_EQ(tok_->Encode(text, true), Ids(c["ids_with_special"]));
  }
}

TEST_P(GoldenTokenizerTest, DecodeOfEncodedTextMatchesHuggingFace) {
  for (const json& c : cases_["encode"]) {
    SCOPED_TRACE("text: \"" + c["text"].get<std::string>().substr(0, 80) + "\"");
    const std::vector<int32_t> ids = Ids(c["ids_with_special"]);
    ExpectDecode(tok_->Decode(ids, false), c["decode"]);
    ExpectDecode(tok_->Decode(ids, true), c["decode_skip"]);
  }
}

TEST_P(GoldenTokenizerTest, DecodeOfPartialUtf8MatchesHuggingFace) {
  ASSERT_GE(cases_["decode"].size(), 20u);
  for (const json& c : cases_["decode"]) {
    SCOPED_TRACE("ids: " + c["ids"].dump());
    const std::vector<int32_t> ids = Ids(c["ids"]);
    ExpectDecode(tok_->Decode(ids, false), c["decode"]);
    ExpectDecode(tok_->Decode(ids, true), c["decode_skip"]);
  }
}

TEST_P(GoldenTokenizerTest, StreamingEqualsDecode) {
  for (const char* section : {"encode", "decode"}) {
    for (const json& c : cases_[section]) {
      const std::vector<int32_t> ids =
          Ids(c[c.contains("ids_with_special") ? "ids_with_special" : "ids"]);
      SCOPED_TRACE(std::string(section) + " ids: " + json(ids).dump());
      EXPECT_EQ(StreamAll(*tok_, ids, false), tok_->Decode(ids, false));
      EXPECT_EQ(StreamAll(*tok_, ids, true), tok_->Decode(ids, true));
      ExpectDecode(StreamAll(*tok_, ids, false), c["decode"]);
      ExpectDecode(StreamAll(*tok_, ids, true), c["decode_skip"]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTokenizerTest,
                         ::testing::Values("llama3", "gpt2", "qwen2", "mixed", "splits", "fallback",
                                           "fused_unk", "strata_trained", "llama2", "mistral_v3",
                                           "sp_split", "sp_never"));

// ---------------------------------------------------------------------------------------------
// Specific behaviour on the Llama-3-style fixture.

class Llama3TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = LoadOrDie(kFixtures + "llama3/tokenizer.json");
    ASSERT_NE(tok_, nullptr);
  }
  // The id of the vocab token for one raw byte.
  int32_t ByteId(unsigned char b) const {
    for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
      if (!tok_->IsAddedToken(id) && tok_->TokenBytes(id) == std::string(1, b)) return id;
    }
    ADD_FAILURE() << "no token for byte " << int{b};
    return -1;
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Llama3TokenizerTest, SpecialTokensAndLookups) {
  std::optional<int32_t> bos = tok_->TokenToId("<|begin_of_text|>");
  ASSERT_TRUE(bos.has_value());
  EXPECT_TRUE(tok_->IsSpecial(*bos));
  EXPECT_TRUE(tok_->IsAddedToken(*bos));
  EXPECT_EQ(tok_->IdToToken(*bos), "<|begin_of_text|>");
  EXPECT_EQ(tok_->Encode("", true), std::vector<int32_t>{*bos});
  EXPECT_EQ(tok_->Encode("<|eot_id|>", false),
            std::vector<int32_t>{*tok_->TokenToId("<|eot_id|>")});
  // Vocab tokens are spelled in the ByteLevel alphabet: a space is "Ġ".
  std::optional<int32_t> space = tok_->TokenToId("\xC4\xA0");
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ(tok_->TokenBytes(*space), " ");
  EXPECT_FALSE(tok_->IsSpecial(*space));
  EXPECT_FALSE(tok_->TokenToId("no such token").has_value());
  EXPECT_FALSE(tok_->IdToToken(tok_->vocab_size()).has_value());
}

TEST_F(Llama3TokenizerTest, DecodeSkipsUnknownIds) {
  const std::vector<int32_t> hello = tok_->Encode("hello", false);
  std::vector<int32_t> ids = {-5, tok_->vocab_size(), 1 << 30};
  ids.insert(ids.begin() + 1, hello.begin(), hello.end());
  EXPECT_EQ(tok_->Decode(ids), "hello");
  EXPECT_EQ(tok_->TokenBytes(-1), "");
  StreamDecoder stream(tok_.get());
  EXPECT_EQ(stream.Push(-1), "");
  EXPECT_EQ(stream.Push(tok_->vocab_size() + 7), "");
}

TEST_F(Llama3TokenizerTest, StreamDecoderHoldsSplitEmojiAndCjk) {
  StreamDecoder stream(tok_.get());
  // U+1F600 is F0 9F 98 80; nothing comes out until its last byte arrives.
  EXPECT_EQ(stream.Push(ByteId(0xF0)), "");
  EXPECT_EQ(stream.Push(ByteId(0x9F)), "");
  EXPECT_EQ(stream.Push(ByteId(0x98)), "");
  EXPECT_EQ(stream.Push(ByteId(0x80)), "\xF0\x9F\x98\x80");
  // "你" (E4 BD A0) then "a": the CJK character is released whole.
  EXPECT_EQ(stream.Push(ByteId(0xE4)), "");
  EXPECT_EQ(stream.Push(ByteId(0xBD)), "");
  EXPECT_EQ(stream.Push(ByteId(0xA0)), "\xE4\xBD\xA0");
  // An interrupted sequence turns into U+FFFD as soon as it cannot complete.
  EXPECT_EQ(stream.Push(ByteId(0xE4)), "");
  EXPECT_EQ(stream.Push(ByteId('a')),
            "\xEF\xBF\xBD"
            "a");
  // A tail that never completes comes out of Flush as one U+FFFD.
  EXPECT_EQ(stream.Push(ByteId(0xF0)), "");
  EXPECT_EQ(stream.Push(ByteId(0x9F)), "");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(Llama3TokenizerTest, StreamDecoderSplitsZwjSequencesOnlyAtCharacterBoundaries) {
  const std::string family = "👨‍👩‍👧‍👦 家族 🏳️‍🌈";
  const std::vector<int32_t> ids = tok_->Encode(family, false);
  ASSERT_GT(ids.size(), 6u);
  EXPECT_EQ(StreamAll(*tok_, ids, true), family);
}

TEST_F(Llama3TokenizerTest, InvalidUtf8InputEncodesAsReplacementCharacters) {
  EXPECT_EQ(tok_->Encode("ab\xFF\xE4\xBD"
                         "cd",
                         false),
            tok_->Encode("ab\xEF\xBF\xBD\xEF\xBF\xBD"
                         "cd",
                         false));
}

TEST_F(Llama3TokenizerTest, LongPromptEncodesFastAndRoundTrips) {
  const std::string corpus = ReadOrDie(kFixtures + "trainer_corpus.txt");
  std::string text;
  while (text.size() < 400000) text += corpus;
  auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok_->Encode(text, false);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ids.size(), 100000u);
  // Generous bound (sanitizer builds, shared CI cores); a quadratic pass would take minutes.
  EXPECT_LT(seconds, 20.0) << ids.size() << " tokens";
  EXPECT_EQ(tok_->Decode(ids), text);
}

TEST_F(Llama3TokenizerTest, HugeWhitespaceAndSingleWordRunsRoundTrip) {
  for (const std::string& text : {std::string(300000, ' '), std::string(200000, '\n') + "x",
                                  std::string(100000, 'a'), std::string(50000, '!')}) {
    const std::vector<int32_t> ids = tok_->Encode(text, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok_->Decode(ids), text);
  }
}

TEST(TokenizerRegexTest, BacktrackingHeavySplitOnLongInputStillSplits) {
  // A group repeated 400k times needs more backtracking state than a small JIT stack holds.
  json j = json::parse(ReadOrDie(kFixtures + "llama3/tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:a|b)+|c";
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "ab";
  text += "cab";
  const std::vector<int32_t> ids = (*tok)->Encode(text);
  EXPECT_EQ((*tok)->Decode(ids), text);
  // The regex must still find every piece: the a/b run, then "c", then "ab".
  std::vector<int32_t> expected = (*tok)->Encode(text.substr(0, 400000));
  for (const char* piece : {"c", "ab"}) {
    const std::vector<int32_t> more = (*tok)->Encode(piece);
    expected.insert(expected.end(), more.begin(), more.end());
  }
  EXPECT_EQ(ids, expected);
}

TEST_F(Llama3TokenizerTest, ConcurrentEncodesAgree) {
  const std::string text = ReadOrDie(kFixtures + "trainer_corpus.txt");
  const std::vector<int32_t> expected = tok_->Encode(text, true);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) r = tok_->Encode(text, true);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style fixtures (Llama 2 layout: Prepend/Replace normalizers, Replace,
// ByteFallback, Fuse, Strip decoders).

class Llama2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = LoadOrDie(kFixtures + "llama2/tokenizer.json");
    ASSERT_NE(tok_, nullptr);
  }
  int32_t Id(const std::string& token) const {
    std::optional<int32_t> id = tok_->TokenToId(token);
    EXPECT_TRUE(id.has_value()) << token;
    return id.value_or(-1);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Llama2TokenizerTest, TokenBytesMapsMetaspaceAndFallbackBytes) {
  EXPECT_EQ(tok_->TokenBytes(Id("<0xE4>")), "\xE4");
  EXPECT_EQ(tok_->TokenBytes(Id("<0x41>")), "A");
  EXPECT_EQ(tok_->TokenBytes(Id("\u2581")), " ");
  EXPECT_EQ(tok_->TokenBytes(Id("<s>")), "<s>");
  EXPECT_TRUE(tok_->IsSpecial(Id("<s>")));
  EXPECT_EQ(tok_->IdToToken(Id("<0x0A>")), "<0x0A>");
}

TEST_F(Llama2TokenizerTest, StreamDecoderHoldsByteFallbackRuns) {
  const int32_t space = Id("\u2581");
  StreamDecoder stream(tok_.get());
  // The Strip decoder removes the text's first space, so nothing shows before the next token.
  EXPECT_EQ(stream.Push(space), "");
  // "你" (E4 BD A0) as byte tokens: held until a token that is not a byte token ends the run.
  EXPECT_EQ(stream.Push(Id("<0xE4>")), "");
  EXPECT_EQ(stream.Push(Id("<0xBD>")), "");
  EXPECT_EQ(stream.Push(Id("<0xA0>")), "");
  EXPECT_EQ(stream.Push(space), "\xE4\xBD\xA0 ");
  // A run that is not valid UTF-8 as a whole becomes one U+FFFD per byte, even its ASCII byte.
  EXPECT_EQ(stream.Push(Id("<0x41>")), "");
  EXPECT_EQ(stream.Push(Id("<0xE4>")), "");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(Llama2TokenizerTest, LongPromptEncodesFastAndRoundTrips) {
  const std::string corpus = ReadOrDie(kFixtures + "trainer_corpus.txt");
  std::string text;
  while (text.size() < 200000) text += corpus;
  auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok_->Encode(text, false);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ids.size(), 50000u);
  EXPECT_LT(seconds, 20.0) << ids.size() << " tokens";
  // Byte fallback covers every character, and Strip removes only the prepended space.
  EXPECT_EQ(tok_->Decode(ids), text);
  EXPECT_EQ(StreamAll(*tok_, ids, true), text);
}

TEST_F(Llama2TokenizerTest, HugeWhitespaceRunsRoundTrip) {
  for (const std::string& text :
       {std::string(200000, ' '), std::string(100000, '\n') + "x", " " + std::string(50000, 'a')}) {
    const std::vector<int32_t> ids = tok_->Encode(text, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tok_->Decode(ids), text);
  }
}

TEST(SentencePieceTokenizerTest, MetaspaceFirstPrependsOnlyAtInputStart) {
  std::unique_ptr<Tokenizer> tok = LoadOrDie(kFixtures + "mistral_v3/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  const std::string marked = "\u2581hi";
  const std::vector<int32_t> at_start = tok->Encode("hi", false);
  EXPECT_EQ(at_start, tok->Encode(marked, false));
  // After a special token the text does not start the input: no marker is prepended.
  std::vector<int32_t> after = tok->Encode("[INST]hi", false);
  ASSERT_FALSE(after.empty());
  after.erase(after.begin());
  EXPECT_NE(after, at_start);
  EXPECT_EQ(tok->Decode(after), "hi");
}

// ---------------------------------------------------------------------------------------------
// Load errors name the file and the feature.

json FixtureJson(const std::string& name) {
  return json::parse(ReadOrDie(kFixtures + name + "/tokenizer.json"));
}

absl::Status LoadStatus(const json& j) {
  return Tokenizer::FromJson(j.dump(), "test.json").status();
}

void ExpectInvalid(const absl::Status& status, const std::string& feature) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("test.json")) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(feature)) << status;
}

TEST(TokenizerErrorTest, MalformedJson) {
  ExpectInvalid(Tokenizer::FromJson("{\"model\": ", "test.json").status(), "malformed JSON");
  ExpectInvalid(Tokenizer::FromJson("[1, 2]", "test.json").status(), "not a JSON object");
}

TEST(TokenizerErrorTest, MissingFileIsNotFound) {
  absl::Status s = Tokenizer::FromFile("/nonexistent/dir/tokenizer.json").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST(TokenizerErrorTest, UnsupportedModelType) {
  json j = FixtureJson("gpt2");
  j["model"]["type"] = "WordPiece";
  ExpectInvalid(LoadStatus(j), "WordPiece");
}

TEST(TokenizerErrorTest, UnsupportedPipelinePieces) {
  json j = FixtureJson("qwen2");
  j["normalizer"] = {{"type", "Lowercase"}};
  ExpectInvalid(LoadStatus(j), "Lowercase");
  j = FixtureJson("qwen2");
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectInvalid(LoadStatus(j), "Whitespace");
  j = FixtureJson("qwen2");
  json& steps = j["pre_tokenizer"]["pretokenizers"];
  steps.insert(steps.begin(), json{{"type", "Metaspace"}, {"replacement", "_"}});
  ExpectInvalid(LoadStatus(j), "both ByteLevel and Metaspace");
  j = FixtureJson("qwen2");
  j["decoder"] = {{"type", "Metaspace"}};
  ExpectInvalid(LoadStatus(j), "Metaspace");
  j = FixtureJson("qwen2");
  j["decoder"] = {{"type", "CTC"}};
  ExpectInvalid(LoadStatus(j), "CTC");
  j = FixtureJson("qwen2");
  j["post_processor"] = {{"type", "Fancy"}};
  ExpectInvalid(LoadStatus(j), "Fancy");
  j = FixtureJson("qwen2");
  j["model"]["dropout"] = 0.1;
  ExpectInvalid(LoadStatus(j), "dropout");
  j = FixtureJson("qwen2");
  j["model"]["continuing_subword_prefix"] = "##";
  ExpectInvalid(LoadStatus(j), "continuing_subword_prefix");
}

TEST(TokenizerErrorTest, BadSentencePiecePieces) {
  json j = FixtureJson("mistral_v3");
  j["pre_tokenizer"]["replacement"] = "ab";
  ExpectInvalid(LoadStatus(j), "replacement must be one character");
  j = FixtureJson("mistral_v3");
  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  ExpectInvalid(LoadStatus(j), "sometimes");
  j = FixtureJson("llama2");
  j["normalizer"]["normalizers"][1]["pattern"] = {{"String", ""}};
  ExpectInvalid(LoadStatus(j), "empty String pattern");
  j = FixtureJson("llama2");
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "(unclosed"}};
  ExpectInvalid(LoadStatus(j), "bad regex");
  j = FixtureJson("llama2");
  j["normalizer"]["normalizers"][0].erase("prepend");
  ExpectInvalid(LoadStatus(j), "Prepend");
  j = FixtureJson("llama2");
  j["decoder"]["decoders"][3]["start"] = -1;
  ExpectInvalid(LoadStatus(j), "Strip");
  j = FixtureJson("llama2");
  j["decoder"]["decoders"].push_back({{"type", "ByteLevel"}});
  ExpectInvalid(LoadStatus(j), "ByteLevel after Fuse");
}

TEST(TokenizerErrorTest, DeepNestingIsRefused) {
  json j = FixtureJson("llama2");
  json decoder = j["decoder"];
  for (int i = 0; i < 20; ++i)
    decoder = {{"type", "Sequence"}, {"decoders", json::array({decoder})}};
  j["decoder"] = decoder;
  ExpectInvalid(LoadStatus(j), "nest too deeply");
  std::string deep = "{\"model\": " + std::string(100, '[') + std::string(100, ']') + "}";
  ExpectInvalid(Tokenizer::FromJson(deep, "test.json").status(), "nested deeper");
}

TEST(TokenizerErrorTest, BadVocabMergesAndRegex) {
  json j = FixtureJson("gpt2");
  j["model"]["merges"].push_back("notintheVocab x");
  ExpectInvalid(LoadStatus(j), "not in the vocab");
  j = FixtureJson("gpt2");
  j["model"]["merges"].push_back(42);
  ExpectInvalid(LoadStatus(j), "merge #");
  j = FixtureJson("llama3");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([unclosed";
  ExpectInvalid(LoadStatus(j), "bad regex");
  j = FixtureJson("llama3");
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  ExpectInvalid(LoadStatus(j), "Sideways");
  j = FixtureJson("llama3");
  j["model"]["vocab"] = "not an object";
  ExpectInvalid(LoadStatus(j), "vocab");
  j = FixtureJson("llama3");
  j["added_tokens"][0]["content"] = 7;
  ExpectInvalid(LoadStatus(j), "added_tokens");
}

// ---------------------------------------------------------------------------------------------
// The trainer.

TEST(TrainByteLevelBpeTest, MatchesRecordedFixture) {
  const std::string corpus = ReadOrDie(kFixtures + "trainer_corpus.txt");
  absl::StatusOr<std::string> trained =
      TrainByteLevelBpe(corpus, kTrainVocab, kTrainSpecials, "<|begin_of_text|>");
  ASSERT_TRUE(trained.ok()) << trained.status();
  absl::StatusOr<std::string> recorded =
      ReadFileToString(kFixtures + "strata_trained/tokenizer.json");
  if (!recorded.ok() || *recorded != *trained) {
    const std::string out = std::string(STRATA_BINARY_DIR) + "/tokenizer_trained.json";
    ASSERT_TRUE(WriteStringToFile(out, *trained).ok());
    FAIL() << "trainer output differs from the fixture; if intended, run "
              "scripts/fixtures/make_tokenizer_fixtures.py --trained-json "
           << out;
  }
}

TEST(TrainByteLevelBpeTest, IsDeterministicAndRoundTrips) {
  const std::string corpus = ReadOrDie(kFixtures + "trainer_corpus.txt");
  absl::StatusOr<std::string> a = TrainByteLevelBpe(corpus, 400, kTrainSpecials);
  absl::StatusOr<std::string> b = TrainByteLevelBpe(corpus, 400, kTrainSpecials);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(*a, "trained");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 400 + static_cast<int>(kTrainSpecials.size()));
  EXPECT_EQ((*tok)->TokenToId("<|begin_of_text|>"), 400);
  EXPECT_EQ((*tok)->TokenToId("<|im_end|>"), 403);
  const std::vector<int32_t> ids = (*tok)->Encode(corpus, true);
  // 144 merges compress the text they were trained on (about 0.65 tokens per byte here).
  EXPECT_LT(ids.size(), corpus.size() * 7 / 10);
  EXPECT_EQ((*tok)->Decode(ids), corpus);
  EXPECT_EQ((*tok)->Encode("<|im_start|>", true), std::vector<int32_t>{402});  // no BOS asked
}

TEST(TrainByteLevelBpeTest, StopsWhenPairsRunOut) {
  absl::StatusOr<std::string> json_text = TrainByteLevelBpe("abab", 1000, {});
  ASSERT_TRUE(json_text.ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(*json_text);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 258);  // "ab", then "abab"
  EXPECT_EQ((*tok)->Encode("abab"), std::vector<int32_t>{257});
}

TEST(TrainByteLevelBpeTest, FillsTheVocabWithLetterStringsThatRoundTrip) {
  const std::string corpus = "hello world, hello strata";
  absl::StatusOr<std::string> json_text =
      TrainByteLevelBpe(corpus, 2000, kTrainSpecials, "<|begin_of_text|>", true);
  ASSERT_TRUE(json_text.ok()) << json_text.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromJson(*json_text);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 2000 + static_cast<int>(kTrainSpecials.size()));
  EXPECT_EQ((*tok)->TokenToId("<|begin_of_text|>"), 2000);
  // Every letter pair, with and without a leading space, is one token; the corpus's merges
  // still come first.
  EXPECT_EQ((*tok)->Encode(" zq").size(), 1u);
  EXPECT_EQ((*tok)->Encode("qz").size(), 1u);
  EXPECT_EQ((*tok)->Encode(" hello").size(), 1u);
  // Every filled token decodes to letters, optionally after one space.
  for (int32_t id = 256; id < 2000; ++id) {
    const std::string text = (*tok)->Decode(std::vector<int32_t>{id});
    ASSERT_FALSE(text.empty()) << id;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      const bool letter = c >= 'a' && c <= 'z';
      ASSERT_TRUE(letter || (i == 0 && c == ' ') || corpus.find(text) != std::string::npos)
          << id << " '" << text << "'";
    }
  }
  const std::string text = "Some text: with abc xyz, 42 digits and \xe4\xbd\xa0\xe5\xa5\xbd!";
  EXPECT_EQ((*tok)->Decode((*tok)->Encode(text)), text);
  // Without the fill, the same corpus runs out of pairs long before 2,000 tokens.
  absl::StatusOr<std::string> unfilled = TrainByteLevelBpe(corpus, 2000, {});
  ASSERT_TRUE(unfilled.ok());
  EXPECT_LT((*Tokenizer::FromJson(*unfilled))->vocab_size(), 300);
}

TEST(TrainByteLevelBpeTest, RejectsBadArguments) {
  EXPECT_EQ(TrainByteLevelBpe("x", 255, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainByteLevelBpe("x", 300, {"<a>", "<a>"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainByteLevelBpe("x", 300, {""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainByteLevelBpe("x", 300, {"<a>"}, "<b>").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainByteLevelBpe("x", 300, {"x"}).status().code(),
            absl::StatusCode::kInvalidArgument);  // collides with the byte token "x"
}

}  // namespace
}  // namespace strata
