#include "src/dfa.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace strata::grammar {
namespace {

constexpr size_t kMaxDeterminizeWork = 20'000'000;

// Epsilon closure of `seeds`, sorted: the canonical name of a DFA state.
class Closure {
 public:
  explicit Closure(const std::vector<NfaState>& states)
      : states_(states), mark_(states.size(), 0) {}

  std::vector<int32_t> Of(const std::vector<int32_t>& seeds) {
    ++generation_;
    std::vector<int32_t> out, stack;
    for (int32_t s : seeds) Visit(s, &out, &stack);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (int32_t t : states_[s].eps) Visit(t, &out, &stack);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  void Visit(int32_t s, std::vector<int32_t>* out, std::vector<int32_t>* stack) {
    if (mark_[s] == generation_) return;
    mark_[s] = generation_;
    out->push_back(s);
    stack->push_back(s);
  }

  const std::vector<NfaState>& states_;
  std::vector<uint32_t> mark_;
  uint32_t generation_ = 0;
};

// Bytes that no edge tells apart share a class, so the table has a column per class.
int ByteClasses(const std::vector<NfaState>& states, std::vector<uint8_t>* byte_class) {
  std::vector<uint8_t> boundary(257, 0);
  for (const NfaState& s : states) {
    for (const NfaEdge& e : s.edges) {
      boundary[e.lo] = 1;
      boundary[e.hi + 1] = 1;
    }
  }
  byte_class->assign(256, 0);
  int c = 0;
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && boundary[b]) ++c;
    (*byte_class)[b] = static_cast<uint8_t>(c);
  }
  return c + 1;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> Determinize(const NfaBuilder& nfa, Frag whole,
                                                           size_t max_states) {
  const std::vector<NfaState>& states = nfa.states();
  std::vector<uint8_t> byte_class;
  const int num_classes = ByteClasses(states, &byte_class);
  std::vector<uint8_t> class_lo(num_classes);
  for (int b = 255; b >= 0; --b) class_lo[byte_class[b]] = static_cast<uint8_t>(b);

  Closure closure(states);
  std::vector<std::vector<int32_t>> sets;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids;
  std::vector<int32_t> next;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    if (set.empty()) return Grammar::kDead;
    auto [it, added] = ids.try_emplace(set, static_cast<int32_t>(sets.size()));
    if (added) sets.push_back(std::move(set));
    return it->second;
  };
  intern(closure.Of({whole.in}));
  std::vector<std::vector<int32_t>> targets(num_classes);
  // Bounds the construction's time as max_states bounds its size: each DFA state costs the
  // NFA states it holds and the edges it follows.
  size_t work = 0;
  for (size_t d = 0; d < sets.size(); ++d) {
    work += sets[d].size();
    if (sets.size() > max_states || work > kMaxDeterminizeWork) {
      return absl::InvalidArgumentError(
          absl::StrCat("the constraint is too complex: its automaton exceeds ", max_states,
                       " states (simplify the schema or pattern)"));
    }
    for (auto& t : targets) t.clear();
    for (int32_t s : sets[d]) {
      work += states[s].edges.size();
      for (const NfaEdge& e : states[s].edges) {
        for (int c = byte_class[e.lo]; c <= byte_class[e.hi]; ++c) targets[c].push_back(e.to);
      }
    }
    for (int c = 0; c < num_classes; ++c) {
      // Interning may grow `sets`; the row is appended after the lookups.
      next.push_back(targets[c].empty() ? Grammar::kDead : intern(closure.Of(targets[c])));
    }
  }
  const size_t n = sets.size();
  std::vector<uint8_t> accepting(n, 0);
  for (size_t d = 0; d < n; ++d) {
    accepting[d] = std::binary_search(sets[d].begin(), sets[d].end(), whole.out) ? 1 : 0;
  }
  // Trim: keep the states from which acceptance is reachable (backwards from accepting ones).
  std::vector<std::vector<int32_t>> preds(n);
  for (size_t d = 0; d < n; ++d) {
    for (int c = 0; c < num_classes; ++c) {
      const int32_t t = next[d * num_classes + c];
      if (t != Grammar::kDead) preds[t].push_back(static_cast<int32_t>(d));
    }
  }
  std::vector<uint8_t> live(accepting);
  std::vector<int32_t> stack;
  for (size_t d = 0; d < n; ++d) {
    if (live[d]) stack.push_back(static_cast<int32_t>(d));
  }
  while (!stack.empty()) {
    const int32_t d = stack.back();
    stack.pop_back();
    for (int32_t p : preds[d]) {
      if (!live[p]) {
        live[p] = 1;
        stack.push_back(p);
      }
    }
  }
  if (!live[0]) {
    return absl::InvalidArgumentError("the constraint admits no output at all");
  }
  // Renumber the live states densely, start first.
  std::vector<int32_t> renumber(n, Grammar::kDead);
  int32_t count = 0;
  for (size_t d = 0; d < n; ++d) {
    if (live[d]) renumber[d] = count++;
  }
  std::vector<int32_t> table;
  table.reserve(static_cast<size_t>(count) * num_classes);
  std::vector<uint8_t> accept_out;
  for (size_t d = 0; d < n; ++d) {
    if (!live[d]) continue;
    for (int c = 0; c < num_classes; ++c) {
      const int32_t t = next[d * num_classes + c];
      table.push_back(t == Grammar::kDead ? Grammar::kDead : renumber[t]);
    }
    accept_out.push_back(accepting[d]);
  }
  return std::make_shared<const Grammar>(0, num_classes, std::move(byte_class), std::move(table),
                                         std::move(accept_out));
}

Grammar::Grammar(int32_t start, int num_classes, std::vector<uint8_t> byte_class,
                 std::vector<int32_t> next, std::vector<uint8_t> accepting)
    : start_(start),
      num_classes_(num_classes),
      byte_class_(std::move(byte_class)),
      next_(std::move(next)),
      accepting_(std::move(accepting)) {
  can_continue_.assign(accepting_.size(), 0);
  for (size_t d = 0; d < accepting_.size(); ++d) {
    for (int c = 0; c < num_classes_; ++c) {
      if (next_[d * num_classes_ + c] != kDead) can_continue_[d] = 1;
    }
  }
}

int32_t Grammar::Advance(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = Next(state, static_cast<uint8_t>(c));
  }
  return state;
}

}  // namespace strata::grammar
