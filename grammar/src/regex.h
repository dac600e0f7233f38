#pragma once
// The regex subset structured output accepts, parsed to a tree and compiled to NFA fragments:
// literals (UTF-8), `.`, classes `[a-z]` `[^...]`, escapes \d \D \w \W \s \S \n \r \t \f \v
// \xHH \uHHHH and escaped punctuation, groups `(...)` `(?:...)` `(?P<n>...)` `(?<n>...)`, `|`,
// quantifiers * + ? {n} {n,} {n,m} (a trailing lazy `?` is accepted: it does not change the
// language), and `^` / `$` at the ends of the pattern. The whole output matches the pattern.
// Anything else (backreferences, lookaround, \b, inline flags) is refused with its offset.
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/nfa.h"
#include "strata/grammar/grammar.h"

namespace strata::grammar {

struct RegexNode {
  enum class Kind { kSet, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kSet: normalized code point ranges
  std::vector<RegexNode> children;                    // kSeq, kAlt; kRepeat: one child
  int min = 0, max = -1;                              // kRepeat; max -1: unbounded
};

struct RegexOptions {
  // Inside a JSON string: the characters JSON must escape (", \ and controls) are left out of
  // every class and refused as literals, so the match can be written between quotes as is.
  bool json_string = false;
};

absl::StatusOr<RegexNode> ParseRegex(std::string_view pattern, const Limits& limits,
                                     const RegexOptions& options = {});
Frag CompileRegex(const RegexNode& node, NfaBuilder* nfa);

}  // namespace strata::grammar
