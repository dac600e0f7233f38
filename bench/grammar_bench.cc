// Structured output's per-token cost on the host: for each schema, over a real vocabulary (a
// preset's tokenizer.json), the compile time, the cost of one state's token mask by the trie
// walk (a cache miss) and by brute force, and the cost per generated token of what the engine
// does each step (fetch the state's mask, mask a logits row, advance the automaton), cold
// (masks computed as states are met) and warm (all cached). Tokens are drawn uniformly from
// each mask, restarting at completion, so the walk visits the states a model could.
//
// Usage: grammar_bench TOKENIZER_JSON|preset:NAME CASES_JSON [TOKENS [PRESET_DIR]]
// (scripts/bench_grammar.py writes the cases and runs xgrammar on the same ones; with
// PRESET_DIR the preset is written there and kept). Prints a markdown table.
#include <chrono>
#include <cstdio>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "strata/engine/presets.h"
#include "strata/grammar/grammar.h"
#include "strata/grammar/token_mask.h"
#include "strata/text/tokenizer.h"

namespace strata::grammar {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Case {
  std::string name;
  GuidedDecoding spec;
};

// [{"name", "kind": "json_schema" | "json_object" | "regex" | "choice" | "grammar", "spec"}].
std::vector<Case> ReadCases(const std::string& path) {
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  std::vector<Case> cases;
  if (!j.is_array()) return cases;
  for (const auto& c : j) {
    Case k{c.value("name", ""), {}};
    const std::string kind = c.value("kind", "");
    for (auto v : {GuidedDecoding::Kind::kJsonObject, GuidedDecoding::Kind::kJsonSchema,
                   GuidedDecoding::Kind::kRegex, GuidedDecoding::Kind::kChoice,
                   GuidedDecoding::Kind::kGrammar}) {
      if (kind == GuidedKindName(v)) k.spec.kind = v;
    }
    k.spec.spec = c.value("spec", "");
    cases.push_back(std::move(k));
  }
  return cases;
}

void Run(const Case& c, const std::shared_ptr<const TokenVocabulary>& vocab, int tokens) {
  const auto t0 = Clock::now();
  auto compiled = Grammar::Compile(c.spec);
  const auto t1 = Clock::now();
  if (!compiled.ok()) {
    std::printf("| %s | compile failed: %s |\n", c.name.c_str(),
                compiled.status().ToString().c_str());
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
  // Per token: the state's mask (cached after the state's first visit) and the automaton's
  // step; picking the token (the model's part) is outside the timing.
  auto generate = [&]() {
    int32_t state = g.start();
    Clock::duration spent{};
    for (int i = 0; i < tokens; ++i) {
      if (g.IsAccepting(state) && (!g.CanContinue(state) || rng() % 16 == 0)) state = g.start();
      const auto t = Clock::now();
      const auto mask = masker.Mask(state);
      spent += Clock::now() - t;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (MaskHas(*mask, id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      const int32_t token = allowed[rng() % allowed.size()];
      const auto a = Clock::now();
      state = masker.Advance(state, token);
      spent += Clock::now() - a;
    }
    return Us(spent) / tokens;
  };
  const double cold = generate();
  rng.seed(1);
  const double warm = generate();
  // Applying one mask to one logits row on the host, as the engine does (disallowed to -inf).
  const auto mask = masker.Mask(g.start());
  const auto m0 = Clock::now();
  constexpr int kRows = 200;
  for (int r = 0; r < kRows; ++r) {
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!MaskHas(*mask, static_cast<int32_t>(t))) logits[t] = -1e30f;
    }
  }
  const double apply_us = Us(Clock::now() - m0) / kRows;
  std::printf("| %s | %d | %.2f | %.0f | %.0f | %.1f | %.2f | %.0f |\n", c.name.c_str(),
              g.num_states(), std::chrono::duration<double, std::milli>(t1 - t0).count(),
              walk_us, brute_us, cold, warm, apply_us);
}

}  // namespace
}  // namespace strata::grammar

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: grammar_bench TOKENIZER_JSON|preset:NAME CASES_JSON [TOKENS]\n");
    return 2;
  }
  // "preset:NAME": that preset's tokenizer.json, written to a temporary directory.
  std::string path = argv[1];
  std::string tmp;
  if (path.rfind("preset:", 0) == 0) {
    // A fifth argument keeps the preset there (for a side-by-side run on the same file).
    tmp = argc > 4 ? argv[4]
                   : std::filesystem::temp_directory_path().string() + "/grammar_bench_" +
                         std::to_string(::getpid());
    if (auto s = strata::WritePreset(path.substr(7), tmp); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    path = tmp + "/tokenizer.json";
  }
  const auto cases = strata::grammar::ReadCases(argv[2]);
  const int tokens = argc > 3 ? std::atoi(argv[3]) : 2000;
  if (cases.empty() || tokens <= 0) {
    std::fprintf(stderr, "no cases in %s\n", argv[2]);
    return 2;
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
      "force, µs/state | mask + advance per token, cold, µs | warm, µs | mask applied to a "
      "logits row, µs |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& c : cases) strata::grammar::Run(c, vocab, tokens);
  if (!tmp.empty() && argc <= 4) std::filesystem::remove_all(tmp);
  return 0;
}
