// Structured output's per-token cost on the host: for each schema, over a real vocabulary (a
// preset's tokenizer.json), the compile time, the cost of one state's token mask by the trie
// walk (a cache miss) and by brute force, and the cost per generated token of what the engine
// does each step (fetch the state's mask, mask a logits row, advance the automaton), cold
// (masks computed as states are met) and warm (all cached). Tokens are drawn uniformly from
// each mask, restarting at completion, so the walk visits the states a model could.
//
// Usage: grammar_bench [TOKENIZER_JSON] (default: the llama-3.1-8b-shape preset's, written to
// a temporary directory). Prints a markdown table.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strata/engine/presets.h"
#include "strata/grammar/grammar.h"
#include "strata/grammar/token_mask.h"
#include "strata/text/tokenizer.h"

namespace strata::grammar {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Case {
  const char* name;
  GuidedDecoding spec;
};

const Case kCases[] = {
    {"person (nested object, enum array)",
     {GuidedDecoding::Kind::kJsonSchema,
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
      R"("age":{"type":"integer"},"address":{"type":"object","properties":{)"
      R"("street":{"type":"string","maxLength":16},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},)"
      R"("required":["street","zip"],"additionalProperties":false},)"
      R"("tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3}},)"
      R"("required":["name","age","address","tags"],"additionalProperties":false})"}},
    {"todo list (array of objects, date)",
     {GuidedDecoding::Kind::kJsonSchema,
      R"({"type":"object","properties":{"items":{"type":"array","minItems":1,"maxItems":3,)"
      R"("items":{"type":"object","properties":{"id":{"type":"integer"},)"
      R"("kind":{"enum":["task","bug",7,null]},"done":{"type":"boolean"},)"
      R"("when":{"type":"string","format":"date"}},"required":["id","kind","done","when"],)"
      R"("additionalProperties":false}}},"required":["items"],"additionalProperties":false})"}},
    {"free strings (3 unbounded string fields)",
     {GuidedDecoding::Kind::kJsonSchema,
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},)"
      R"("c":{"type":"array","items":{"type":"string"}}},"required":["a","b","c"]})"}},
    {"json_object (any object, depth 5)", {GuidedDecoding::Kind::kJsonObject, ""}},
    {"regex (phone-like)",
     {GuidedDecoding::Kind::kRegex, R"(\+?[0-9]{1,3}[ -]?\(?[0-9]{3}\)?[ -]?[0-9]{3}-[0-9]{4})"}},
};

void Run(const Case& c, const std::shared_ptr<const TokenVocabulary>& vocab, int tokens) {
  const auto t0 = Clock::now();
  auto compiled = Grammar::Compile(c.spec);
  const auto t1 = Clock::now();
  if (!compiled.ok()) {
    std::printf("| %s | compile failed: %s |\n", c.name, compiled.status().ToString().c_str());
    return;
  }
  const Grammar& g = **compiled;
  // One mask per state: trie walk vs brute force (a sample of states for brute force).
  const auto w0 = Clock::now();
  for (int32_t s = 0; s < g.num_states(); ++s) (void)vocab->Walk(g, s);
  const double walk_us = Us(Clock::now() - w0) / g.num_states();
  const int32_t brute_states = std::min<int32_t>(g.num_states(), 20);
  const auto b0 = Clock::now();
  for (int32_t s = 0; s < brute_states; ++s) (void)vocab->BruteForce(g, s);
  const double brute_us = Us(Clock::now() - b0) / brute_states;

  TokenMasker masker(*compiled, vocab);
  std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
  std::mt19937 rng(1);
  auto generate = [&]() {
    int32_t state = g.start();
    const auto start = Clock::now();
    for (int i = 0; i < tokens; ++i) {
      if (g.IsAccepting(state) && (!g.CanContinue(state) || rng() % 16 == 0)) state = g.start();
      const auto mask = masker.Mask(state);
      // What the engine does to the row: disallowed logits to -inf.
      std::vector<int32_t> allowed;
      for (size_t w = 0; w < mask->size(); ++w) {
        uint32_t word = (*mask)[w];
        for (int b = 0; b < 32; ++b) {
          const size_t t = w * 32 + b;
          if (t >= logits.size()) break;
          if ((word >> b) & 1u) {
            allowed.push_back(static_cast<int32_t>(t));
          } else {
            logits[t] = -std::numeric_limits<float>::infinity();
          }
        }
      }
      if (allowed.empty()) break;
      state = masker.Advance(state, allowed[rng() % allowed.size()]);
    }
    return Us(Clock::now() - start) / tokens;
  };
  const double cold = generate();
  rng.seed(1);
  const double warm = generate();
  std::printf("| %s | %d | %.2f | %.0f | %.0f | %.1f | %.1f |\n", c.name, g.num_states(),
              std::chrono::duration<double, std::milli>(t1 - t0).count(), walk_us, brute_us,
              cold, warm);
}

}  // namespace
}  // namespace strata::grammar

int main(int argc, char** argv) {
  std::string path;
  std::string tmp;
  if (argc > 1) {
    path = argv[1];
  } else {
    tmp = std::filesystem::temp_directory_path().string() + "/grammar_bench_" +
          std::to_string(::getpid());
    if (auto s = strata::WritePreset("llama-3.1-8b-shape", tmp); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    path = tmp + "/tokenizer.json";
  }
  auto tok = strata::Tokenizer::FromFile(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string> bytes;
  std::vector<bool> usable;
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    bytes.push_back((*tok)->TokenBytes(id));
    usable.push_back(!(*tok)->IsSpecial(id));
  }
  const auto v0 = std::chrono::steady_clock::now();
  auto vocab = strata::grammar::TokenVocabulary::Create(bytes, usable);
  std::printf("vocabulary: %d tokens (%s), trie built in %.0f ms\n\n", vocab->size(), path.c_str(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - v0)
                  .count());
  std::printf(
      "| constraint | DFA states | compile ms | mask by trie walk, µs/state | mask by brute "
      "force, µs/state | per token cold, µs | per token warm, µs |\n|---|---|---|---|---|---|---|\n");
  for (const auto& c : strata::grammar::kCases) strata::grammar::Run(c, vocab, 2000);
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
  return 0;
}
