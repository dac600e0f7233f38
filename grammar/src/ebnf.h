#pragma once
// EBNF grammars in the GBNF form (llama.cpp's, which xgrammar and vLLM's guided_grammar take):
//   root  ::= "{" ws pair ("," ws pair)* "}"      # the output matches rule `root`
//   pair  ::= [a-z]+ ":" ws ("yes" | "no")
//   ws    ::= [ \t\n]{0,2}
// Rules `name ::= alternatives` (names of [A-Za-z0-9_-]); strings "..." with \n \r \t \\ \"
// \xHH \uHHHH escapes; classes [...] as in the regex subset; `.`; groups; `|`; quantifiers
// * + ? {m} {m,} {m,n}; comments from `#` to the end of the line. The automaton is finite, so a
// rule that refers to itself (directly or through others) is unrolled: a rule may be open at
// most kMaxRuleRecursion times on one path, and deeper references match nothing.
#include <string_view>

#include "absl/status/statusor.h"
#include "src/nfa.h"
#include "strata/grammar/grammar.h"

namespace strata::grammar {

inline constexpr int kMaxRuleRecursion = 4;

absl::StatusOr<Frag> CompileEbnf(std::string_view text, const Limits& limits, NfaBuilder* nfa);

}  // namespace strata::grammar
