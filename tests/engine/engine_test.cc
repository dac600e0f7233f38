// End-to-end engine behavior on the built-in tiny-llama preset.
#include "strata/engine/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <span>

#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/engine/model_config.h"
#include "strata/engine/presets.h"
#include "strata/engine/weight_source.h"
#include "strata/text/tokenizer.h"

namespace strata {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs each test case as its own process, in parallel.
    dir_ = new std::string(::testing::TempDir() + "/strata_engine_test_tiny_llama_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama", *dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  std::unique_ptr<Engine> Make(bool prefix_caching = true, int num_blocks = 128,
                               bool device_sampling = true) {
    EngineOptions opts;
    opts.device_sampling = device_sampling;
    opts.runner.block_size = 8;
    opts.runner.num_kv_blocks = num_blocks;
    opts.enable_prefix_caching = prefix_caching;
    auto e = Engine::Create(*dir_, opts);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  static std::string* dir_;
};
std::string* EngineTest::dir_ = nullptr;

SamplingParams Greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

TEST_F(EngineTest, GeneratesExactlyMaxTokensAndStreamsTheSameText) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  auto out = e->Generate({"The capital of France is"}, Greedy(12));
  ASSERT_TRUE(out.ok()) << out.status();
  const Completion& c = (*out)[0];
  EXPECT_EQ(c.tokens.size(), 12u);
  EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  // Streamed text pieces add up to the full decode of the tokens.
  EXPECT_EQ(c.text, e->tokenizer().Decode(c.tokens, /*skip_special_tokens=*/true));
}

TEST_F(EngineTest, PrefixCachingReportsCachedTokensAndKeepsOutputs) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  const std::string prompt =
      "Time to first token and time per output token are the two latencies that users feel.";
  auto first = e->Generate({prompt}, Greedy(8));
  auto second = e->Generate({prompt}, Greedy(8));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ((*first)[0].cached_tokens, 0);
  EXPECT_GT((*second)[0].cached_tokens, 0);
  EXPECT_EQ((*second)[0].cached_tokens % 8, 0);
  EXPECT_EQ((*first)[0].tokens, (*second)[0].tokens);
  auto cold = Make(/*prefix_caching=*/false);
  auto third = cold->Generate({prompt}, Greedy(8));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)[0].tokens, (*first)[0].tokens);
}

SamplingParams Salted(int n, std::string salt) {
  SamplingParams p = Greedy(n);
  p.cache_salt = std::move(salt);
  return p;
}

TEST_F(EngineTest, CacheSaltSharesBlocksOnlyWithTheSameSalt) {
  auto e = Make();
  ASSERT_NE(e, nullptr);
  const std::string prompt =
      "Tenants that send the same system prompt must not learn from each other's cache hits.";
  auto cached = [&](const SamplingParams& params) {
    auto out = e->Generate({prompt}, params);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0].cached_tokens : -1;
  };
  EXPECT_EQ(cached(Salted(4, "tenant-a")), 0);
  EXPECT_EQ(cached(Salted(4, "tenant-b")), 0);  // another salt: nothing shared
  EXPECT_EQ(cached(Greedy(4)), 0);              // no salt: nothing shared either
  EXPECT_GT(cached(Salted(4, "tenant-a")), 0);
  EXPECT_GT(cached(Salted(4, "tenant-b")), 0);
  EXPECT_GT(cached(Greedy(4)), 0);
  // The cache holds three disjoint chains for the one prompt, each under its own salt.
  const std::vector<int32_t> tokens = e->tokenizer().Encode(prompt, /*add_special_tokens=*/true);
  const size_t full = (tokens.size() - 1) / 8;
  ASSERT_GT(full, 0u);
  std::set<BlockHash> held;
  for (BlockHash h : e->block_manager().CachedHashes()) held.insert(h);
  std::set<BlockHash> expected;
  for (const char* salt : {"tenant-a", "tenant-b", ""}) {
    for (BlockHash h : e->block_hasher().Salted(salt).Chain(
             std::span<const int32_t>(tokens.data(), full * 8), 8)) {
      EXPECT_TRUE(held.contains(h)) << salt;
      expected.insert(h);
    }
  }
  EXPECT_EQ(expected.size(), 3 * full);
  // The decode side's reservation (a disaggregated request) honours the salt too.
  auto other = e->ReservePrompt(tokens, "tenant-c");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->cached_tokens, 0);
  e->CancelReservation(*other);
  auto same = e->ReservePrompt(tokens, "tenant-a");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->cached_tokens, static_cast<int32_t>(full * 8));
  e->CancelReservation(*same);
  // A salt from a peer is bounded as the API bounds it.
  const absl::Status too_long = e->AddRequest(
      "long-salt", tokens, Salted(4, std::string(SamplingParams::kMaxCacheSaltBytes + 1, 's')));
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("cache_salt"), std::string::npos);
}

TEST_F(EngineTest, AClusterKeyKeysEveryCachedBlock) {
  auto key = BlockHashKey::FromBytes("a cluster key of at least 16 bytes");
  ASSERT_TRUE(key.ok()) << key.status();
  EngineOptions opts;
  opts.runner.block_size = 8;
  opts.runner.num_kv_blocks = 64;
  opts.kv_hash_key = *key;
  auto keyed = Engine::Create(*dir_, opts);
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  auto plain = Make();
  ASSERT_NE(plain, nullptr);
  const std::string prompt = "Block hashes keyed per cluster cannot be predicted from outside.";
  for (Engine* e : {keyed->get(), plain.get()}) {
    auto first = e->Generate({prompt}, Greedy(4));
    auto second = e->Generate({prompt}, Greedy(4));
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ((*first)[0].cached_tokens, 0);
    EXPECT_GT((*second)[0].cached_tokens, 0);  // a key still lets equal prompts share
  }
  EXPECT_EQ((*keyed)->block_hasher().key(), key->get());
  std::set<BlockHash> plain_hashes;
  for (BlockHash h : plain->block_manager().CachedHashes()) plain_hashes.insert(h);
  const std::vector<BlockHash> keyed_hashes = (*keyed)->block_manager().CachedHashes();
  ASSERT_FALSE(keyed_hashes.empty());
  for (BlockHash h : keyed_hashes) EXPECT_FALSE(plain_hashes.contains(h));
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  auto e = Make();
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.max_tokens = 16;
  p.seed = 1234;
  p.ignore_eos = true;
  auto a = e->Generate({"Once upon a time"}, p);
  auto b = e->Generate({"Once upon a time"}, p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)[0].tokens, (*b)[0].tokens);
  p.seed = 99;
  auto c = e->Generate({"Once upon a time"}, p);
  EXPECT_NE((*a)[0].tokens, (*c)[0].tokens);
}

// The CPU plugin has the `sample` entry: steps sample through it unless device_sampling is
// off. Both paths apply one rule with one generator, so a batch of mixed requests (greedy,
// each truncation, logprobs) comes out identical, and a request with a penalty (host only)
// mixed into the batch changes nothing for the others.
TEST_F(EngineTest, DeviceAndHostSamplingGiveTheSameTokensAndLogprobs) {
  std::vector<SamplingParams> mix(5);
  for (size_t i = 0; i < mix.size(); ++i) {
    mix[i].max_tokens = 12;
    mix[i].ignore_eos = true;
    mix[i].seed = 100 + i;
  }
  mix[0].temperature = 0;
  mix[1].temperature = 1.2f, mix[1].top_k = 20;
  mix[2].temperature = 0.9f, mix[2].top_p = 0.8f, mix[2].logprobs = 3;
  mix[3].temperature = 1.0f, mix[3].min_p = 0.1f, mix[3].logprobs = 0;
  mix[4].temperature = 1.0f;
  auto run = [&](bool device, bool with_penalty) {
    auto e = Make(true, 128, device);
    std::vector<std::string> ids;
    for (size_t i = 0; i < mix.size(); ++i) {
      SamplingParams p = mix[i];
      if (with_penalty && i == 4) p.repetition_penalty = 1.3f;
      const std::string id = "r" + std::to_string(i);
      const absl::Status added = e->AddTextRequest(id, "once upon a time " + std::to_string(i), p);
      EXPECT_TRUE(added.ok()) << added;
      ids.push_back(id);
    }
    std::map<std::string, std::vector<int32_t>> tokens;
    std::map<std::string, std::vector<float>> logprobs;
    while (e->HasUnfinished()) {
      auto outs = e->Step();
      EXPECT_TRUE(outs.ok()) << outs.status();
      if (!outs.ok()) break;
      for (const RequestOutput& o : *outs) {
        auto& t = tokens[o.request_id];
        t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
        for (const SampleResult& s : o.logprobs) {
          logprobs[o.request_id].push_back(s.logprob);
          for (const auto& top : s.top) logprobs[o.request_id].push_back(top.logprob);
        }
      }
    }
    std::vector<std::vector<int32_t>> t;
    std::vector<std::vector<float>> l;
    for (const auto& id : ids) t.push_back(tokens[id]), l.push_back(logprobs[id]);
    return std::make_pair(t, l);
  };
  const auto host = run(false, false), device = run(true, false);
  EXPECT_EQ(host.first, device.first);
  EXPECT_EQ(host.second, device.second);
  for (const auto& t : device.first) EXPECT_EQ(t.size(), 12u);
  EXPECT_EQ(device.second[2].size(), 12u * 4);  // chosen + top 3 per token
  // Sampled requests really sample: not all of them follow the greedy one.
  EXPECT_NE(device.first[1], device.first[0]);
  const auto mixed = run(true, true);
  for (size_t i = 0; i + 1 < mix.size(); ++i) EXPECT_EQ(mixed.first[i], device.first[i]) << i;
  // The penalized request is sampled on the host from its own logits row, mid-batch: the
  // same as when every row goes through the host sampler.
  const auto mixed_host = run(false, true);
  EXPECT_EQ(mixed.first, mixed_host.first);
  EXPECT_EQ(mixed.second, mixed_host.second);
  EXPECT_NE(mixed.first[4], device.first[4]);  // the penalty changed that request's tokens
}

TEST_F(EngineTest, StopStringTruncatesTextAndStops) {
  auto e = Make();
  auto full = e->Generate({"Hello"}, Greedy(24));
  ASSERT_TRUE(full.ok());
  const std::string text = (*full)[0].text;
  ASSERT_GE(text.size(), 6u);
  // Stop on a piece of the greedy text: output ends right before its first occurrence.
  const std::string stop = text.substr(text.size() / 2, 3);
  SamplingParams p = Greedy(24);
  p.stop = {stop};
  auto out = e->Generate({"Hello"}, p);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ((*out)[0].text, text.substr(0, text.find(stop)));
}

TEST_F(EngineTest, StopTokenIdEndsGeneration) {
  auto e = Make();
  auto full = e->Generate({"Hello"}, Greedy(10));
  ASSERT_TRUE(full.ok());
  SamplingParams p = Greedy(10);
  p.stop_token_ids = {(*full)[0].tokens[3]};
  auto out = e->Generate({"Hello"}, p);
  ASSERT_TRUE(out.ok());
  const auto& toks = (*out)[0].tokens;
  EXPECT_EQ((*out)[0].finish_reason, FinishReason::kStop);
  EXPECT_LE(toks.size(), 4u);
  EXPECT_EQ(toks.back(), (*full)[0].tokens[3]);
}

TEST_F(EngineTest, IncludeStopStrInOutputKeepsTheStopStringAndTheStopTokensText) {
  auto e = Make();
  auto full = e->Generate({"Hello"}, Greedy(24));
  ASSERT_TRUE(full.ok());
  const std::string text = (*full)[0].text;
  ASSERT_GE(text.size(), 6u);
  SamplingParams p = Greedy(24);
  p.stop = {text.substr(text.size() / 2, 3)};
  p.include_stop_str_in_output = true;
  auto out = e->Generate({"Hello"}, p);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ((*out)[0].text, text.substr(0, text.find(p.stop[0]) + p.stop[0].size()));

  // A stop token's text: left out by default, kept on request.
  const std::vector<int32_t>& tokens = (*full)[0].tokens;
  SamplingParams by_token = Greedy(24);
  by_token.stop_token_ids = {tokens[3]};
  const size_t end = std::find(tokens.begin(), tokens.end(), tokens[3]) - tokens.begin();
  const std::vector<int32_t> before(tokens.begin(), tokens.begin() + end);
  const std::vector<int32_t> with(tokens.begin(), tokens.begin() + end + 1);
  auto cut = e->Generate({"Hello"}, by_token);
  by_token.include_stop_str_in_output = true;
  auto kept = e->Generate({"Hello"}, by_token);
  ASSERT_TRUE(cut.ok() && kept.ok());
  EXPECT_EQ((*cut)[0].text, e->tokenizer().Decode(before, /*skip_special_tokens=*/true));
  EXPECT_EQ((*kept)[0].text, e->tokenizer().Decode(with, /*skip_special_tokens=*/true));
  EXPECT_EQ((*kept)[0].tokens, with);
  EXPECT_NE((*cut)[0].text, (*kept)[0].text);  // the stop token has text to keep
}

TEST_F(EngineTest, MinTokensKeepsStopTokensAndStringsFromEndingEarly) {
  for (bool device_sampling : {true, false}) {
    SCOPED_TRACE(device_sampling ? "device sampling" : "host sampling");
    auto e = Make(/*prefix_caching=*/true, /*num_blocks=*/128, device_sampling);
    auto full = e->Generate({"Hello"}, Greedy(8));
    ASSERT_TRUE(full.ok());
    const int32_t first = (*full)[0].tokens[0];
    // Stopping on the first greedy token ends at once without min_tokens.
    SamplingParams p = Greedy(8);
    p.stop_token_ids = {first};
    auto at_once = e->Generate({"Hello"}, p);
    ASSERT_TRUE(at_once.ok());
    EXPECT_EQ((*at_once)[0].tokens.size(), 1u);
    // With min_tokens the token cannot be drawn until 3 tokens exist.
    p.min_tokens = 3;
    auto out = e->Generate({"Hello"}, p);
    ASSERT_TRUE(out.ok());
    const std::vector<int32_t>& tokens = (*out)[0].tokens;
    ASSERT_GE(tokens.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_NE(tokens[i], first) << i;
    // A stop string in the first tokens' text does not end the request before min_tokens.
    SamplingParams s = Greedy(8);
    s.stop = {(*full)[0].text.substr(0, 1)};
    s.min_tokens = 4;
    auto strings = e->Generate({"Hello"}, s);
    ASSERT_TRUE(strings.ok());
    EXPECT_GE((*strings)[0].tokens.size(), 4u);
  }
}

// logit_bias needs the host sampler (the plugin's `sample` op takes no bias): with device
// sampling on, a biased request's row comes back to the host, mid-batch, and obeys the bias.
TEST_F(EngineTest, LogitBiasSteersGreedyDecodingOnBothSamplingPaths) {
  for (bool device_sampling : {true, false}) {
    SCOPED_TRACE(device_sampling ? "device sampling" : "host sampling");
    auto e = Make(/*prefix_caching=*/true, /*num_blocks=*/128, device_sampling);
    auto plain = e->Generate({"Hello"}, Greedy(6));
    ASSERT_TRUE(plain.ok());
    const std::vector<int32_t>& greedy = (*plain)[0].tokens;
    // A token the greedy output never picks, pushed up by +100, is every output token.
    int32_t forced = 7;
    while (std::find(greedy.begin(), greedy.end(), forced) != greedy.end()) ++forced;
    SamplingParams up = Greedy(6);
    up.logit_bias = {{forced, 100.0f}};
    auto pushed = e->Generate({"Hello"}, up);
    ASSERT_TRUE(pushed.ok());
    EXPECT_EQ((*pushed)[0].tokens, std::vector<int32_t>(6, forced));
    // -100 on the first greedy token: the first output token changes.
    SamplingParams down = Greedy(6);
    down.logit_bias = {{greedy[0], -100.0f}};
    auto banned = e->Generate({"Hello"}, down);
    ASSERT_TRUE(banned.ok());
    ASSERT_FALSE((*banned)[0].tokens.empty());
    EXPECT_NE((*banned)[0].tokens[0], greedy[0]);
    for (int32_t t : (*banned)[0].tokens) EXPECT_NE(t, greedy[0]);
    // One batch of a biased and an unbiased request: each gets its own tokens.
    ASSERT_TRUE(e->AddTextRequest("plain", "Hello", Greedy(6)).ok());
    ASSERT_TRUE(e->AddTextRequest("biased", "Hello", up).ok());
    std::map<std::string, std::vector<int32_t>> tokens;
    while (e->HasUnfinished()) {
      auto outs = e->Step();
      ASSERT_TRUE(outs.ok()) << outs.status();
      for (const RequestOutput& o : *outs) {
        auto& t = tokens[o.request_id];
        t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    EXPECT_EQ(tokens["plain"], greedy);
    EXPECT_EQ(tokens["biased"], std::vector<int32_t>(6, forced));
    // An id outside the vocabulary is refused.
    SamplingParams bad = Greedy(2);
    bad.logit_bias = {{e->config().vocab_size, 1.0f}};
    EXPECT_EQ(e->Generate({"Hello"}, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(EngineTest, RejectsBadRequestsWithoutDisturbingOthers) {
  auto e = Make(true, 16);  // 128 tokens of cache
  ASSERT_TRUE(e->AddRequest("ok", {1, 2, 3}, Greedy(4)).ok());
  EXPECT_EQ(e->AddRequest("ok", {1}, Greedy(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest("empty", {}, Greedy(4)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest("bad", {1, 1 << 20}, Greedy(4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e->AddRequest("long", std::vector<int32_t>(500, 1), Greedy(4)).code(),
            absl::StatusCode::kInvalidArgument);
  SamplingParams bad = Greedy(4);
  bad.top_p = 2;
  EXPECT_EQ(e->AddRequest("p", {1}, bad).code(), absl::StatusCode::kInvalidArgument);
  int tokens = 0;
  bool finished = false;
  while (e->HasUnfinished()) {
    auto step = e->Step();
    ASSERT_TRUE(step.ok());
    for (const auto& o : *step) {
      EXPECT_EQ(o.request_id, "ok");
      tokens += static_cast<int>(o.new_tokens.size());
      finished = finished || o.finished;
    }
  }
  EXPECT_EQ(tokens, 4);
  EXPECT_TRUE(finished);
}

TEST_F(EngineTest, AbortFreesBlocksAndLengthIsClippedToTheCache) {
  auto e = Make(false, 16);
  const int free_before = e->block_manager().num_free_blocks();
  ASSERT_TRUE(e->AddRequest("a", {1, 2, 3, 4, 5}, Greedy(1000)).ok());
  ASSERT_TRUE(e->Step().ok());
  EXPECT_LT(e->block_manager().num_free_blocks(), free_before);
  EXPECT_TRUE(e->Abort("a"));
  EXPECT_FALSE(e->Abort("a"));
  EXPECT_EQ(e->block_manager().num_free_blocks(), free_before);
  // A request asking for more than the cache holds stops at the cache's size.
  ASSERT_TRUE(e->AddRequest("b", {1, 2, 3}, Greedy(1000)).ok());
  int n = 0;
  FinishReason reason = FinishReason::kNone;
  while (e->HasUnfinished()) {
    auto step = e->Step();
    ASSERT_TRUE(step.ok());
    for (const auto& o : *step) {
      n += static_cast<int>(o.new_tokens.size());
      if (o.finished) reason = o.finish_reason;
    }
  }
  EXPECT_EQ(n, 16 * 8 - 3);
  EXPECT_EQ(reason, FinishReason::kLength);
}

// One request's outputs, event by event, until it finishes.
struct Streamed {
  std::vector<int32_t> tokens;
  std::vector<size_t> text_after;  // bytes of text emitted after each event
  std::string text;
  int32_t completion_tokens = 0;
  FinishReason finish = FinishReason::kNone;
};

Streamed RunToEnd(Engine& e, const std::string& id) {
  Streamed s;
  while (e.HasUnfinished()) {
    auto outs = e.Step();
    EXPECT_TRUE(outs.ok()) << outs.status();
    if (!outs.ok()) break;
    for (const RequestOutput& o : *outs) {
      if (o.request_id != id) continue;
      s.tokens.insert(s.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      s.text += o.new_text;
      for (size_t i = 0; i < o.new_tokens.size(); ++i) s.text_after.push_back(s.text.size());
      if (o.finished) {
        s.completion_tokens = o.completion_tokens;
        s.finish = o.finish_reason;
      }
    }
  }
  return s;
}

// A stream cut after k tokens and resumed on a fresh engine from those tokens and the text the
// client had (what the router does when a decode worker dies mid-answer) continues exactly as
// the uninterrupted stream did: greedy with a stop string (whose held-back text tail the
// resumed stream must send), and seeded sampling with a frequency penalty (the generator's
// draws and the penalty's counts include the resumed tokens).
TEST_F(EngineTest, AResumedRequestContinuesExactlyWhereItsStreamWasCut) {
  auto probe = Make();
  ASSERT_NE(probe, nullptr);
  const std::vector<int32_t> prompt = probe->tokenizer().Encode("Once upon a time", true);
  auto plain = probe->Generate({"Once upon a time"}, Greedy(24));
  ASSERT_TRUE(plain.ok());
  const std::string greedy_text = (*plain)[0].text;
  ASSERT_GE(greedy_text.size(), 12u);

  SamplingParams with_stop = Greedy(24);
  with_stop.stop = {greedy_text.substr(greedy_text.size() * 3 / 4, 4), "never appears here"};
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.top_k = 40;
  sampled.seed = 77;
  sampled.frequency_penalty = 0.5f;
  sampled.max_tokens = 24;
  sampled.ignore_eos = true;
  for (const SamplingParams& p : {with_stop, sampled}) {
    auto e = Make();
    ASSERT_TRUE(e->AddRequest("full", prompt, p).ok());
    const Streamed full = RunToEnd(*e, "full");
    ASSERT_GE(full.tokens.size(), 14u);
    for (size_t k : {size_t{1}, size_t{6}, full.tokens.size() - 1, full.tokens.size()}) {
      ResumedOutput had;
      had.tokens.assign(full.tokens.begin(), full.tokens.begin() + k);
      had.text_emitted = full.text_after[k - 1];
      auto fresh = Make();
      ASSERT_TRUE(fresh->AddRequest("resumed", prompt, p, had).ok()) << k;
      const Streamed rest = RunToEnd(*fresh, "resumed");
      EXPECT_EQ(rest.tokens, std::vector<int32_t>(full.tokens.begin() + k, full.tokens.end()))
          << "cut after " << k;
      EXPECT_EQ(full.text.substr(0, had.text_emitted) + rest.text, full.text) << k;
      EXPECT_EQ(rest.completion_tokens, full.completion_tokens) << k;
      EXPECT_EQ(rest.finish, full.finish) << k;
    }
  }
}

TEST_F(EngineTest, AResumedRequestWithBadOutputIsRejected) {
  auto e = Make();
  const std::vector<int32_t> prompt = e->tokenizer().Encode("Hello", true);
  ResumedOutput bad_id;
  bad_id.tokens = {1, e->config().vocab_size};
  auto s = e->AddRequest("a", prompt, Greedy(8), bad_id);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("resumed token id"), std::string::npos) << s;
  ResumedOutput beyond;
  beyond.tokens = {prompt.back()};
  beyond.text_emitted = 1000;
  s = e->AddRequest("b", prompt, Greedy(8), beyond);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("beyond"), std::string::npos) << s;
  EXPECT_FALSE(e->HasUnfinished());
}

TEST_F(EngineTest, MaxTokensZeroFinishesImmediately) {
  auto e = Make();
  ASSERT_TRUE(e->AddRequest("z", {1, 2}, Greedy(0)).ok());
  auto step = e->Step();
  ASSERT_TRUE(step.ok());
  ASSERT_EQ(step->size(), 1u);
  EXPECT_TRUE((*step)[0].finished);
  EXPECT_EQ((*step)[0].completion_tokens, 0);
  EXPECT_FALSE(e->HasUnfinished());
}

TEST(PresetTest, PresetsAreDeterministicAndUnknownNamesFail) {
  const std::string base = ::testing::TempDir() + "/preset_" + std::to_string(::getpid());
  const std::string a = base + "_a", b = base + "_b";
  ASSERT_TRUE(WritePreset("tiny-moe", a).ok());
  ASSERT_TRUE(WritePreset("tiny-moe", b).ok());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
    EXPECT_EQ(*ReadFileToString(a + "/" + f), *ReadFileToString(b + "/" + f)) << f;
  }
  EngineOptions opts;
  opts.runner.num_kv_blocks = 64;
  auto e = Engine::Create(a, opts);
  ASSERT_TRUE(e.ok()) << e.status();
  auto out = (*e)->Generate({"Hello", "The five boxing wizards"}, Greedy(6));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1].tokens.size(), 6u);
  EXPECT_EQ(WritePreset("nope", a).code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

// The real-shaped presets: real configs and vocab sizes, weights generated where they load.
TEST(PresetTest, RealShapedPresetsHaveTheRealShapesAndGenerateTheirWeights) {
  struct Want {
    const char* name;
    int vocab, hidden, layers, experts;
  };
  for (const Want& w : {Want{"llama-3.1-8b-shape", 128256, 4096, 32, 0},
                        Want{"qwen3-30b-a3b-shape", 151936, 2048, 48, 128},
                        Want{"mixtral-8x7b-shape", 32000, 4096, 32, 8}}) {
    SCOPED_TRACE(w.name);
    const std::string dir =
        ::testing::TempDir() + "/preset_real_" + w.name + "_" + std::to_string(::getpid());
    ASSERT_TRUE(WritePreset(w.name, dir).ok());
    EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
    auto spec = ReadRandomWeightsSpec(dir);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto c = ModelConfig::FromDirectory(dir);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->vocab_size, w.vocab);
    EXPECT_EQ(c->hidden_size, w.hidden);
    EXPECT_EQ(c->num_layers, w.layers);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->num_experts, w.experts);
    EXPECT_EQ(c->torch_dtype, "bfloat16");
    auto tok = Tokenizer::FromFile(dir + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->vocab_size(), w.vocab);
    const std::string text = "The capital of France is Paris. zebra quokka 1234";
    EXPECT_EQ((*tok)->Decode((*tok)->Encode(text)), text);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// The presets load in transformers and generate what it generates: the fixture was recorded
// from transformers by scripts/fixtures/make_preset_fixtures.py.
TEST(PresetTest, PresetsGenerateWhatTransformersGenerates) {
  auto text =
      ReadFileToString(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/presets/reference.json");
  ASSERT_TRUE(text.ok()) << text.status();
  auto ref = nlohmann::json::parse(*text);
  ASSERT_FALSE(ref["presets"].empty());
  for (const auto& [preset, entry] : ref["presets"].items()) {
    const std::string dir =
        ::testing::TempDir() + "/preset_golden_" + preset + "_" + std::to_string(::getpid());
    ASSERT_TRUE(WritePreset(preset, dir).ok());
    EngineOptions opts;
    opts.runner.num_kv_blocks = 64;
    auto e = Engine::Create(dir, opts);
    ASSERT_TRUE(e.ok()) << e.status();
    for (const auto& c : entry["cases"]) {
      const auto ids = c["input_ids"].get<std::vector<int32_t>>();
      EXPECT_EQ((*e)->tokenizer().Encode(c["prompt"].get<std::string>(), true), ids) << preset;
      const auto expected = c["greedy_new_ids"].get<std::vector<int32_t>>();
      ASSERT_TRUE((*e)->AddRequest("r", ids, Greedy(static_cast<int>(expected.size()))).ok());
      std::vector<int32_t> got;
      while ((*e)->HasUnfinished()) {
        auto step = (*e)->Step();
        ASSERT_TRUE(step.ok());
        for (const auto& o : *step) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
      EXPECT_EQ(got, expected) << preset << ": " << c["prompt"];
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace strata
