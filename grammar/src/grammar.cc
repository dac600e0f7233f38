#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/dfa.h"
#include "src/ebnf.h"
#include "src/json_schema.h"
#include "src/nfa.h"
#include "src/regex.h"
#include "strata/common/json_limits.h"
#include "strata/grammar/grammar.h"

namespace strata {

namespace grammar {
namespace {

constexpr size_t kMaxChoices = 1024;

// A JSON array of non-empty strings: the output is exactly one of them.
absl::StatusOr<Frag> CompileChoice(std::string_view spec, NfaBuilder* nfa) {
  if (absl::Status depth = CheckJsonDepth(spec, 2); !depth.ok()) {
    return absl::InvalidArgumentError("choice: must be an array of strings");
  }
  const nlohmann::json list = nlohmann::json::parse(spec, nullptr, false);
  if (list.is_discarded() || !list.is_array() || list.empty()) {
    return absl::InvalidArgumentError("choice: must be a non-empty array of strings");
  }
  if (list.size() > kMaxChoices) {
    return absl::InvalidArgumentError(
        absl::StrCat("choice: at most ", kMaxChoices, " strings, got ", list.size()));
  }
  std::vector<Frag> options;
  for (const auto& c : list) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError("choice: must be a non-empty array of non-empty strings");
    }
    options.push_back(nfa->Literal(c.get_ref<const std::string&>()));
  }
  return nfa->Alt(options);
}

absl::StatusOr<Frag> CompileSpec(const GuidedDecoding& spec, const Limits& limits,
                                 NfaBuilder* nfa) {
  switch (spec.kind) {
    case GuidedDecoding::Kind::kJsonObject:
      return CompileJsonObject(limits, nfa);
    case GuidedDecoding::Kind::kJsonSchema:
      return CompileJsonSchema(spec.spec, limits, nfa);
    case GuidedDecoding::Kind::kRegex: {
      auto node = ParseRegex(spec.spec, limits);
      if (!node.ok()) return node.status();
      return CompileRegex(*node, nfa);
    }
    case GuidedDecoding::Kind::kChoice:
      return CompileChoice(spec.spec, nfa);
    case GuidedDecoding::Kind::kGrammar:
      return CompileEbnf(spec.spec, limits, nfa);
    case GuidedDecoding::Kind::kNone:
      break;
  }
  return absl::InvalidArgumentError("no constraint to compile");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::Compile(const GuidedDecoding& spec,
                                                                const Limits& limits) {
  if (spec.spec.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(GuidedKindName(spec.kind), ": longer than ",
                                                   limits.max_spec_bytes, " bytes"));
  }
  NfaBuilder nfa(limits.max_nfa_states);
  auto whole = CompileSpec(spec, limits, &nfa);
  if (!whole.ok()) return whole.status();
  if (nfa.overflowed()) {
    return absl::InvalidArgumentError(
        absl::StrCat(GuidedKindName(spec.kind), ": the constraint is too large (its automaton "
                     "exceeds ", limits.max_nfa_states, " states)"));
  }
  return Determinize(nfa, *whole, limits.max_dfa_states);
}

}  // namespace grammar
}  // namespace strata
