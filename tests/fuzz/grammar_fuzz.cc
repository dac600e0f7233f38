// Fuzzes the structured-output compilers (JSON schema, regex, choice list, EBNF). The first byte picks
// the kind; the rest is the constraint's text, as a client sends it. Compiling must not crash,
// hang or exceed its limits, and a compiled grammar must keep its contract: every state reaches
// acceptance, and the token mask from the trie walk equals the brute-force one. A broken
// contract aborts (a finding, like a crash).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "strata/grammar/grammar.h"
#include "strata/grammar/token_mask.h"

namespace {

using strata::GuidedDecoding;
using strata::grammar::Grammar;

// Every single byte, plus a few multi-byte tokens JSON and regexes use.
const std::shared_ptr<const strata::grammar::TokenVocabulary>& Vocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"{\"", "\":", "\",\"", "true", "false", "null", "[]", "{}", "12",
                          "ab", "\\u00", "é", "日本", " \"", "\n", "}]"}) {
      tokens.emplace_back(t);
    }
    return strata::grammar::TokenVocabulary::Create(tokens,
                                                    std::vector<bool>(tokens.size(), true));
  }();
  return vocab;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr GuidedDecoding::Kind kKinds[] = {
      GuidedDecoding::Kind::kJsonSchema, GuidedDecoding::Kind::kRegex,
      GuidedDecoding::Kind::kChoice, GuidedDecoding::Kind::kJsonObject,
      GuidedDecoding::Kind::kGrammar};
  GuidedDecoding spec;
  spec.kind = kKinds[data[0] % 5];
  spec.spec.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  // Smaller automata than the server allows, so each input runs in milliseconds.
  strata::grammar::Limits limits;
  limits.max_nfa_states = 20'000;
  limits.max_dfa_states = 2'000;
  auto g = Grammar::Compile(spec, limits);
  if (!g.ok()) return 0;
  const Grammar& grammar = **g;
  const auto& vocab = Vocabulary();
  for (int32_t s = 0; s < grammar.num_states() && s < 64; ++s) {
    if (!grammar.IsAccepting(s) && !grammar.CanContinue(s)) abort();  // trimmed away
    if (vocab->Walk(grammar, s) != vocab->BruteForce(grammar, s)) abort();
  }
  return 0;
}
