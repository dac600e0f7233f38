#include "src/nfa.h"

#include <algorithm>

namespace strata::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

int EncodedLength(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void Encode(uint32_t cp, int n, uint8_t* out) {
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

}  // namespace

int32_t NfaBuilder::NewState() {
  if (states_.size() >= max_states_) {
    overflowed_ = true;
    if (states_.empty()) states_.emplace_back();
    return 0;  // a placeholder: the compile fails on overflowed() before anything runs
  }
  states_.emplace_back();
  return static_cast<int32_t>(states_.size() - 1);
}

void NfaBuilder::Eps(int32_t from, int32_t to) {
  if (overflowed_) return;
  states_[from].eps.push_back(to);
}

void NfaBuilder::Edge(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
  if (overflowed_) return;
  states_[from].edges.push_back({lo, hi, to});
}

Frag NfaBuilder::Empty() {
  const int32_t s = NewState();
  return {s, s};
}

Frag NfaBuilder::Bytes(uint8_t lo, uint8_t hi) {
  Frag f{NewState(), NewState()};
  Edge(f.in, lo, hi, f.out);
  return f;
}

Frag NfaBuilder::Literal(std::string_view bytes) {
  Frag f = Empty();
  for (char c : bytes) {
    const int32_t next = NewState();
    Edge(f.out, static_cast<uint8_t>(c), static_cast<uint8_t>(c), next);
    f.out = next;
  }
  return f;
}

Frag NfaBuilder::Seq(const std::vector<Frag>& parts) {
  if (parts.empty()) return Empty();
  Frag f = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    Eps(f.out, parts[i].in);
    f.out = parts[i].out;
  }
  return f;
}

Frag NfaBuilder::Alt(const std::vector<Frag>& options) {
  Frag f{NewState(), NewState()};
  for (const Frag& o : options) {
    Eps(f.in, o.in);
    Eps(o.out, f.out);
  }
  return f;
}

Frag NfaBuilder::Optional(Frag inner) {
  Frag f{NewState(), NewState()};
  Eps(f.in, inner.in);
  Eps(inner.out, f.out);
  Eps(f.in, f.out);
  return f;
}

Frag NfaBuilder::Star(Frag inner) {
  Frag f{NewState(), NewState()};
  Eps(f.in, inner.in);
  Eps(f.in, f.out);
  Eps(inner.out, inner.in);
  Eps(inner.out, f.out);
  return f;
}

Frag NfaBuilder::Plus(Frag inner) {
  Frag f{NewState(), NewState()};
  Eps(f.in, inner.in);
  Eps(inner.out, inner.in);
  Eps(inner.out, f.out);
  return f;
}

Frag NfaBuilder::SepList(Frag item, Frag sep) {
  Frag f{item.in, NewState()};
  Eps(item.out, sep.in);
  Eps(sep.out, item.in);
  Eps(item.out, f.out);
  return f;
}

// Splits [lo, hi] (same encoded length) until every piece encodes to byte sequences whose
// positions each range independently, then adds one sequence of byte ranges per piece.
void NfaBuilder::Utf8Range(uint32_t lo, uint32_t hi, std::vector<Frag>* out) {
  const int n = EncodedLength(lo);
  if (n != EncodedLength(hi)) {
    static constexpr uint32_t kMaxOfLength[] = {0, 0x7F, 0x7FF, 0xFFFF};
    Utf8Range(lo, kMaxOfLength[n], out);
    Utf8Range(kMaxOfLength[n] + 1, hi, out);
    return;
  }
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Range(lo, lo | m, out);
        Utf8Range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Range(lo, (hi & ~m) - 1, out);
        Utf8Range(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  Encode(lo, n, a);
  Encode(hi, n, b);
  Frag f = Empty();
  for (int i = 0; i < n; ++i) {
    const int32_t next = NewState();
    Edge(f.out, a[i], b[i], next);
    f.out = next;
  }
  out->push_back(f);
}

Frag NfaBuilder::Codepoints(uint32_t lo, uint32_t hi) { return CodepointSet({{lo, hi}}); }

Frag NfaBuilder::CodepointSet(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::vector<Frag> pieces;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    // Surrogates are not scalar values: UTF-8 cannot carry them.
    if (lo <= 0xDFFF && hi >= 0xD800) {
      if (lo < 0xD800) Utf8Range(lo, 0xD7FF, &pieces);
      if (hi > 0xDFFF) Utf8Range(0xE000, hi, &pieces);
    } else if (lo <= hi) {
      Utf8Range(lo, hi, &pieces);
    }
  }
  if (pieces.size() == 1) return pieces.front();
  return Alt(pieces);
}

std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(
    std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (!negate) return merged;
  std::vector<std::pair<uint32_t, uint32_t>> complement;
  uint32_t next = 0;
  for (const auto& [lo, hi] : merged) {
    if (lo > next) complement.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) complement.emplace_back(next, kMaxCodepoint);
  return complement;
}

}  // namespace strata::grammar
