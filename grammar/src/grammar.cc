#include <optional>
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

// Tool calls in a model family's syntax, each call's object by the spec's "call" schema:
//   llama3_json: CALL ("; " CALL)*            hermes: "<tool_call>\n" CALL "\n</tool_call>", joined by "\n"
//   mistral: "[TOOL_CALLS][" CALL (", " CALL)* "]"
// with 1..max_calls calls (each a copy of the schema's automaton, so max_calls is small).
absl::StatusOr<Frag> CompileToolCalls(std::string_view spec, const Limits& limits,
                                      NfaBuilder* nfa) {
  constexpr int kMaxCalls = 4;
  if (absl::Status depth = CheckJsonDepth(spec, limits.max_nesting + 2); !depth.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tool_calls: ", depth.message()));
  }
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(spec, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("tool_calls: the spec must be a JSON object");
  }
  auto format = j.find("format");
  auto call = j.find("call");
  auto max_calls = j.find("max_calls");
  if (format == j.end() || !format->is_string() || call == j.end() ||
      max_calls == j.end() || !max_calls->is_number_integer()) {
    return absl::InvalidArgumentError("tool_calls: the spec needs format, call and max_calls");
  }
  const int n = max_calls->get<int>();
  if (n < 1 || n > kMaxCalls) {
    return absl::InvalidArgumentError(absl::StrCat("tool_calls: max_calls must be 1..", kMaxCalls));
  }
  const std::string f = format->get<std::string>();
  std::string open, close, sep;
  if (f == "llama3_json") {
    sep = "; ";
  } else if (f == "hermes") {
    open = "<tool_call>\n", close = "\n</tool_call>", sep = "\n";
  } else if (f == "mistral") {
    open = "[TOOL_CALLS][", close = "]", sep = ", ";
  } else {
    return absl::InvalidArgumentError(absl::StrCat("tool_calls: unknown format '", f, "'"));
  }
  const std::string call_schema = call->dump();
  // Built from the last call back: CALL (sep CALL (sep CALL)?)? ...
  std::optional<Frag> tail;
  for (int i = n; i >= 1; --i) {
    auto one = CompileJsonSchema(call_schema, limits, nfa);
    if (!one.ok()) return one.status();
    Frag item = f == "hermes" ? nfa->Seq({nfa->Literal(open), *one, nfa->Literal(close)}) : *one;
    if (tail.has_value()) item = nfa->Seq({item, nfa->Optional(nfa->Seq({nfa->Literal(sep), *tail}))});
    tail = item;
  }
  if (f == "mistral") return nfa->Seq({nfa->Literal(open), *tail, nfa->Literal(close)});
  return *tail;
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
    case GuidedDecoding::Kind::kToolCalls:
      return CompileToolCalls(spec.spec, limits, nfa);
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
