#pragma once
// Structured output: a request's constraint (strata/types/guided.h) compiled to a byte-level
// deterministic automaton, and the token masks derived from it (token_mask.h).
//
// Every constraint (JSON schema, any JSON object, regex, choice list, EBNF grammar) compiles to
// a byte NFA and then, eagerly and within a state limit, to a DFA whose states all reach an
// accepting state: so a generation that follows the automaton can always finish, and the
// output is complete exactly when the state is accepting. Generated JSON is compact: at most
// kMaxJsonWhitespace whitespace bytes between tokens, none before or after the value, and
// numbers bounded in digits, so a model cannot pad forever where the schema leaves it free.
//
// Compile errors are InvalidArgument naming what was refused (an unsupported keyword, a limit,
// a syntax error with its offset): the OpenAI front end returns them as 400.
// A Grammar is immutable and thread-safe after Compile.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/types/guided.h"

namespace strata::grammar {

struct Limits {
  size_t max_spec_bytes = GuidedDecoding::kMaxSpecBytes;
  int max_nesting = 32;               // schema / regex group / grammar rule nesting
  size_t max_nfa_states = 100'000;    // the automaton's size before determinization
  size_t max_dfa_states = 20'000;     // and after
  int max_repeat = 256;               // {m,n}, minItems/maxItems, min/maxLength bounds
  int json_object_depth = 5;          // nesting of free-form JSON values (json_object)
};

// Whitespace bytes allowed between JSON tokens.
inline constexpr int kMaxJsonWhitespace = 2;

class Grammar {
 public:
  static constexpr int32_t kDead = -1;

  static absl::StatusOr<std::shared_ptr<const Grammar>> Compile(const GuidedDecoding& spec,
                                                                const Limits& limits = {});

  int32_t start() const { return start_; }
  // The state after `byte`, or kDead when no accepted output continues that way.
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * num_classes_ + byte_class_[byte]];
  }
  // The state after all of `bytes`, or kDead.
  int32_t Advance(int32_t state, std::string_view bytes) const;
  bool IsAccepting(int32_t state) const { return accepting_[state] != 0; }
  // Some byte keeps the output alive (false: the output is complete and must end here).
  bool CanContinue(int32_t state) const { return can_continue_[state] != 0; }
  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }

  // For the compilers: builds a grammar from its parts (src/dfa.cc).
  Grammar(int32_t start, int num_classes, std::vector<uint8_t> byte_class,
          std::vector<int32_t> next, std::vector<uint8_t> accepting);

 private:
  int32_t start_;
  int num_classes_;
  std::vector<uint8_t> byte_class_;  // 256 entries
  std::vector<int32_t> next_;        // num_states x num_classes
  std::vector<uint8_t> accepting_;
  std::vector<uint8_t> can_continue_;
};

}  // namespace strata::grammar
