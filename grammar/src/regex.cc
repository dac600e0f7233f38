#include "src/regex.h"

#include "absl/strings/str_cat.h"

namespace strata::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

class Parser {
 public:
  Parser(std::string_view p, const Limits& limits, const RegexOptions& options)
      : p_(p), limits_(limits), options_(options) {}

  absl::StatusOr<RegexNode> Parse() {
    if (!p_.empty() && p_[0] == '^') ++pos_;
    RegexNode root;
    if (auto s = Alternation(0, &root); !s.ok()) return s;
    if (pos_ < p_.size()) return Error("unbalanced ')'");
    return root;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: ", std::string(what), " at offset ", pos_));
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek() const { return p_[pos_]; }

  absl::Status Alternation(int depth, RegexNode* out) {
    if (depth > limits_.max_nesting) return Error("groups nested too deeply");
    RegexNode alt;
    alt.kind = RegexNode::Kind::kAlt;
    while (true) {
      RegexNode seq;
      if (auto s = Sequence(depth, &seq); !s.ok()) return s;
      alt.children.push_back(std::move(seq));
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    *out = alt.children.size() == 1 ? std::move(alt.children[0]) : std::move(alt);
    return absl::OkStatus();
  }

  absl::Status Sequence(int depth, RegexNode* out) {
    out->kind = RegexNode::Kind::kSeq;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$' && pos_ + 1 == p_.size()) {
        ++pos_;
        break;
      }
      RegexNode atom;
      if (auto s = Atom(depth, &atom); !s.ok()) return s;
      if (auto s = Quantifier(&atom); !s.ok()) return s;
      out->children.push_back(std::move(atom));
    }
    return absl::OkStatus();
  }

  absl::Status Quantifier(RegexNode* atom) {
    if (AtEnd()) return absl::OkStatus();
    int min = 0, max = -1;
    const char c = Peek();
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      min = 1;
      ++pos_;
    } else if (c == '?') {
      max = 1;
      ++pos_;
    } else if (c == '{') {
      if (auto s = Braces(&min, &max); !s.ok()) return s;
    } else {
      return absl::OkStatus();
    }
    if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: same language
    if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{')) {
      return Error("a quantifier cannot follow a quantifier");
    }
    RegexNode rep;
    rep.kind = RegexNode::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    rep.children.push_back(std::move(*atom));
    *atom = std::move(rep);
    return absl::OkStatus();
  }

  absl::Status Number(int* out) {
    const size_t start = pos_;
    int64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > limits_.max_repeat) return Error(absl::StrCat("repeat bound above ", limits_.max_repeat));
      ++pos_;
    }
    if (pos_ == start) return Error("expected a number in {m,n}");
    *out = static_cast<int>(v);
    return absl::OkStatus();
  }

  absl::Status Braces(int* min, int* max) {
    ++pos_;
    if (auto s = Number(min); !s.ok()) return s;
    *max = *min;
    if (!AtEnd() && Peek() == ',') {
      ++pos_;
      *max = -1;
      if (!AtEnd() && Peek() != '}') {
        if (auto s = Number(max); !s.ok()) return s;
      }
    }
    if (AtEnd() || Peek() != '}') return Error("expected '}'");
    ++pos_;
    if (*max >= 0 && *max < *min) return Error("{m,n} with n < m");
    return absl::OkStatus();
  }

  absl::Status Group(int depth, RegexNode* out) {
    ++pos_;  // (
    if (!AtEnd() && Peek() == '?') {
      ++pos_;
      if (!AtEnd() && Peek() == ':') {
        ++pos_;
      } else if (!AtEnd() && (Peek() == 'P' || Peek() == '<')) {
        if (Peek() == 'P') ++pos_;
        if (AtEnd() || Peek() != '<') return Error("unsupported group syntax");
        const size_t close = p_.find('>', pos_);
        if (close == std::string_view::npos || close + 1 - pos_ > 64 || close == pos_ + 1 ||
            p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!') {
          return Error("lookaround and malformed named groups are not supported");
        }
        pos_ = close + 1;
      } else {
        return Error("lookaround, inline flags and other (?...) groups are not supported");
      }
    }
    if (auto s = Alternation(depth + 1, out); !s.ok()) return s;
    if (AtEnd() || Peek() != ')') return Error("missing ')'");
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status Atom(int depth, RegexNode* out) {
    const char c = Peek();
    if (c == '(') return Group(depth, out);
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    if (c == '^' || c == '$') return Error("'^' and '$' are supported only at the ends");
    out->kind = RegexNode::Kind::kSet;
    Ranges ranges;
    if (c == '.') {
      ++pos_;
      ranges = NormalizeRanges({{'\n', '\n'}}, /*negate=*/true);
    } else if (c == '[') {
      if (auto s = Class(&ranges); !s.ok()) return s;
    } else if (c == '\\') {
      uint32_t cp = 0;
      if (auto s = Escape(&ranges, &cp); !s.ok()) return s;
      if (ranges.empty()) {
        if (auto s = Literal(cp); !s.ok()) return s;
        ranges = {{cp, cp}};
      }
    } else {
      uint32_t cp = 0;
      if (auto s = Utf8(&cp); !s.ok()) return s;
      if (auto s = Literal(cp); !s.ok()) return s;
      ranges = {{cp, cp}};
    }
    out->ranges = Restrict(NormalizeRanges(std::move(ranges), false));
    if (out->ranges.empty()) return Error("a class that matches no character");
    return absl::OkStatus();
  }

  absl::Status Literal(uint32_t cp) {
    if (options_.json_string && (cp < 0x20 || cp == '"' || cp == '\\')) {
      return Error("the pattern matches a character a JSON string must escape");
    }
    return absl::OkStatus();
  }

  // Keeps what a JSON string may hold unescaped, in json_string mode.
  Ranges Restrict(Ranges r) const {
    if (!options_.json_string) return r;
    Ranges out;
    for (auto [lo, hi] : r) {
      lo = std::max<uint32_t>(lo, 0x20);
      for (uint32_t cut : {uint32_t{'"'}, uint32_t{'\\'}}) {
        if (lo <= cut && cut <= hi) {
          if (lo < cut) out.emplace_back(lo, cut - 1);
          lo = cut + 1;
        }
      }
      if (lo <= hi) out.emplace_back(lo, hi);
    }
    return out;
  }

  absl::Status Utf8(uint32_t* cp) {
    const auto b0 = static_cast<uint8_t>(p_[pos_]);
    const int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > p_.size()) return Error("invalid UTF-8");
    uint32_t v = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<uint8_t>(p_[pos_ + i]);
      if ((b & 0xC0) != 0x80) return Error("invalid UTF-8");
      v = (v << 6) | (b & 0x3F);
    }
    pos_ += n;
    *cp = v;
    return absl::OkStatus();
  }

  absl::Status Hex(int digits, uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (AtEnd()) return Error("truncated hex escape");
      const char h = Peek();
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return Error("bad hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    *out = v;
    return absl::OkStatus();
  }

  // A class escape fills *ranges; a character escape sets *cp and leaves *ranges empty.
  absl::Status Escape(Ranges* ranges, uint32_t* cp) {
    ++pos_;  // backslash
    if (AtEnd()) return Error("trailing backslash");
    const char e = Peek();
    ++pos_;
    switch (e) {
      case 'd': *ranges = kDigit; return absl::OkStatus();
      case 'w': *ranges = kWord; return absl::OkStatus();
      case 's': *ranges = kSpace; return absl::OkStatus();
      case 'D': *ranges = NormalizeRanges(kDigit, true); return absl::OkStatus();
      case 'W': *ranges = NormalizeRanges(kWord, true); return absl::OkStatus();
      case 'S': *ranges = NormalizeRanges(kSpace, true); return absl::OkStatus();
      case 'n': *cp = '\n'; return absl::OkStatus();
      case 'r': *cp = '\r'; return absl::OkStatus();
      case 't': *cp = '\t'; return absl::OkStatus();
      case 'f': *cp = '\f'; return absl::OkStatus();
      case 'v': *cp = '\v'; return absl::OkStatus();
      case 'x': return Hex(2, cp);
      case 'u': return Hex(4, cp);
      default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
      --pos_;
      return Error(absl::StrCat("unsupported escape \\", std::string(1, e)));
    }
    if (static_cast<uint8_t>(e) >= 0x80) {
      --pos_;
      return Utf8(cp);
    }
    *cp = static_cast<uint8_t>(e);
    return absl::OkStatus();
  }

  absl::Status ClassChar(Ranges* ranges, uint32_t* cp) {
    if (Peek() == '\\') return Escape(ranges, cp);
    if (Peek() == '[' && pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
      return Error("POSIX classes [:name:] are not supported");
    }
    return Utf8(cp);
  }

  absl::Status Class(Ranges* out) {
    ++pos_;  // [
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Peek() == ']' && !first) break;
      first = false;
      Ranges cls;
      uint32_t lo = 0;
      if (auto s = ClassChar(&cls, &lo); !s.ok()) return s;
      if (!cls.empty()) {
        ranges.insert(ranges.end(), cls.begin(), cls.end());
        continue;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < p_.size() && Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (auto s = ClassChar(&cls, &hi); !s.ok()) return s;
        if (!cls.empty()) return Error("a class escape cannot end a range");
        if (hi < lo) return Error("a range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;  // ]
    *out = NormalizeRanges(std::move(ranges), negate);
    return absl::OkStatus();
  }

  std::string_view p_;
  size_t pos_ = 0;
  const Limits& limits_;
  const RegexOptions& options_;
};

}  // namespace

absl::StatusOr<RegexNode> ParseRegex(std::string_view pattern, const Limits& limits,
                                     const RegexOptions& options) {
  if (pattern.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: longer than ", limits.max_spec_bytes, " bytes"));
  }
  return Parser(pattern, limits, options).Parse();
}

Frag CompileRegex(const RegexNode& node, NfaBuilder* nfa) {
  if (nfa->overflowed()) return nfa->Empty();
  switch (node.kind) {
    case RegexNode::Kind::kSet:
      return nfa->CodepointSet(node.ranges);
    case RegexNode::Kind::kSeq: {
      std::vector<Frag> parts;
      for (const RegexNode& c : node.children) parts.push_back(CompileRegex(c, nfa));
      return nfa->Seq(parts);
    }
    case RegexNode::Kind::kAlt: {
      std::vector<Frag> options;
      for (const RegexNode& c : node.children) options.push_back(CompileRegex(c, nfa));
      return nfa->Alt(options);
    }
    case RegexNode::Kind::kRepeat: {
      const RegexNode& c = node.children[0];
      std::vector<Frag> parts;
      for (int i = 0; i < node.min && !nfa->overflowed(); ++i) parts.push_back(CompileRegex(c, nfa));
      if (node.max < 0) {
        parts.push_back(nfa->Star(CompileRegex(c, nfa)));
      } else {
        // Nested optionals: a{0,3} = (a(a(a)?)?)?, linear in the bound.
        Frag tail = nfa->Empty();
        for (int i = node.min; i < node.max && !nfa->overflowed(); ++i) {
          tail = nfa->Optional(nfa->Seq({CompileRegex(c, nfa), tail}));
        }
        parts.push_back(tail);
      }
      return nfa->Seq(parts);
    }
  }
  return nfa->Empty();
}

}  // namespace strata::grammar
