#pragma once
// A byte-level NFA built fragment by fragment (Thompson's construction), the common target of
// the regex, JSON-schema and EBNF compilers. The builder stops adding states past its limit and
// remembers that it overflowed, so compilers check one flag instead of every call.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::grammar {

struct NfaEdge {
  uint8_t lo, hi;  // inclusive byte range
  int32_t to;
};

struct NfaState {
  std::vector<NfaEdge> edges;
  std::vector<int32_t> eps;
};

// A piece of automaton with one entry and one exit state; the exit has no edges yet.
struct Frag {
  int32_t in = -1, out = -1;
};

class NfaBuilder {
 public:
  explicit NfaBuilder(size_t max_states) : max_states_(max_states) {}

  bool overflowed() const { return overflowed_; }
  size_t size() const { return states_.size(); }
  const std::vector<NfaState>& states() const { return states_; }

  int32_t NewState();
  void Eps(int32_t from, int32_t to);
  void Edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to);

  Frag Empty();                                    // matches ""
  Frag Bytes(uint8_t lo, uint8_t hi);              // one byte in [lo, hi]
  Frag Literal(std::string_view bytes);            // exactly these bytes
  Frag Codepoints(uint32_t lo, uint32_t hi);       // one UTF-8 encoded code point in [lo, hi]
  Frag Seq(const std::vector<Frag>& parts);        // concatenation
  Frag Alt(const std::vector<Frag>& options);      // union
  Frag Optional(Frag f);                           // f?
  Frag Star(Frag f);                               // f*
  Frag Plus(Frag f);                               // f+
  // item (sep item)*, with one copy of each: a list's items share their automaton.
  Frag SepList(Frag item, Frag sep);

  // A set of code points as sorted, disjoint, inclusive ranges: one code point of the set.
  Frag CodepointSet(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

 private:
  void Utf8Range(uint32_t lo, uint32_t hi, std::vector<Frag>* out);

  size_t max_states_;
  bool overflowed_ = false;
  std::vector<NfaState> states_;
};

// Sorts and merges code point ranges; with `negate`, the complement within [0, 0x10FFFF]
// (surrogates excluded by the UTF-8 encoder).
std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(
    std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate);

}  // namespace strata::grammar
