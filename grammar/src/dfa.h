#pragma once
// Subset construction from a byte NFA to a trimmed Grammar (every state reaches acceptance).
#include <memory>

#include "absl/status/statusor.h"
#include "src/nfa.h"
#include "strata/grammar/grammar.h"

namespace strata::grammar {

// ResourceExhausted-free: a DFA beyond `max_states` is InvalidArgument (the constraint is too
// complex), as is an automaton that accepts nothing.
absl::StatusOr<std::shared_ptr<const Grammar>> Determinize(const NfaBuilder& nfa, Frag whole,
                                                           size_t max_states);

}  // namespace strata::grammar
