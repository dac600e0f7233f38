#include "src/ebnf.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/regex.h"

namespace strata::grammar {
namespace {

constexpr size_t kMaxRules = 256;

struct Node {
  enum class Kind { kRegex, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  RegexNode regex;   // kRegex: a literal, class or `.`
  std::string name;  // kRef
  std::vector<Node> children;
  int min = 0, max = -1;  // kRepeat
};

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  Parser(std::string_view text, const Limits& limits) : t_(text), limits_(limits) {}

  absl::Status Parse(std::map<std::string, Node>* rules) {
    Skip();
    while (pos_ < t_.size()) {
      std::string name = Name();
      if (name.empty()) return Error("expected a rule name");
      Skip();
      if (t_.substr(pos_, 3) != "::=") return Error("expected '::='");
      pos_ += 3;
      Node body;
      if (auto s = Alternation(0, &body); !s.ok()) return s;
      if (rules->count(name)) return Error(absl::StrCat("rule '", name, "' defined twice"));
      if (rules->size() >= kMaxRules) return Error(absl::StrCat("more than ", kMaxRules, " rules"));
      rules->emplace(std::move(name), std::move(body));
      Skip();
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: ", std::string(what), " at offset ", pos_));
  }

  void Skip() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < t_.size() && IsNameChar(t_[pos_]) && pos_ - start < 64) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // True when the next tokens start a new rule (`name ::=`): the current one ends here.
  bool AtRuleStart() {
    size_t p = pos_;
    while (p < t_.size() && IsNameChar(t_[p])) ++p;
    if (p == pos_) return false;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) ++p;
    return t_.substr(p, 3) == "::=";
  }

  absl::Status Alternation(int depth, Node* out) {
    if (depth > limits_.max_nesting) return Error("groups nested too deeply");
    Node alt;
    alt.kind = Node::Kind::kAlt;
    while (true) {
      Node seq;
      if (auto s = Sequence(depth, &seq); !s.ok()) return s;
      alt.children.push_back(std::move(seq));
      Skip();
      if (pos_ >= t_.size() || t_[pos_] != '|') break;
      ++pos_;
    }
    *out = alt.children.size() == 1 ? std::move(alt.children[0]) : std::move(alt);
    return absl::OkStatus();
  }

  absl::Status Sequence(int depth, Node* out) {
    out->kind = Node::Kind::kSeq;
    while (true) {
      Skip();
      if (pos_ >= t_.size() || t_[pos_] == '|' || t_[pos_] == ')' || AtRuleStart()) break;
      Node atom;
      if (auto s = Atom(depth, &atom); !s.ok()) return s;
      if (auto s = Quantifier(&atom); !s.ok()) return s;
      out->children.push_back(std::move(atom));
    }
    return absl::OkStatus();
  }

  absl::Status Quantifier(Node* atom) {
    if (pos_ >= t_.size()) return absl::OkStatus();
    const char c = t_[pos_];
    if (c != '*' && c != '+' && c != '?' && c != '{') return absl::OkStatus();
    // The regex parser reads the quantifier: "a" plus it, and its kRepeat bounds come back.
    size_t end = pos_ + 1;
    if (c == '{') {
      end = t_.find('}', pos_);
      if (end == std::string_view::npos || end - pos_ > 16) return Error("bad {m,n}");
      ++end;
    }
    auto q = ParseRegex(absl::StrCat("a", std::string(t_.substr(pos_, end - pos_))), limits_);
    // "a{m,n}" parses to a sequence of one repeat.
    if (!q.ok() || q->children.size() != 1 || q->children[0].kind != RegexNode::Kind::kRepeat) {
      return Error("bad quantifier");
    }
    pos_ = end;
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = q->children[0].min;
    rep.max = q->children[0].max;
    rep.children.push_back(std::move(*atom));
    *atom = std::move(rep);
    return absl::OkStatus();
  }

  absl::Status Atom(int depth, Node* out) {
    const char c = t_[pos_];
    if (c == '(') {
      ++pos_;
      if (auto s = Alternation(depth + 1, out); !s.ok()) return s;
      Skip();
      if (pos_ >= t_.size() || t_[pos_] != ')') return Error("missing ')'");
      ++pos_;
      return absl::OkStatus();
    }
    if (c == '"') return Literal(out);
    if (c == '[' || c == '.') {
      size_t end = pos_ + 1;
      if (c == '[') {
        // The class ends at the first ']' that is not escaped and not its first member.
        end = pos_ + 1;
        if (end < t_.size() && t_[end] == '^') ++end;
        if (end < t_.size() && t_[end] == ']') ++end;
        while (end < t_.size() && t_[end] != ']') end += t_[end] == '\\' ? 2 : 1;
        if (end >= t_.size()) return Error("missing ']'");
        ++end;
      }
      auto node = ParseRegex(t_.substr(pos_, end - pos_), limits_);
      if (!node.ok()) return Error(std::string(node.status().message()));
      out->kind = Node::Kind::kRegex;
      out->regex = *std::move(node);
      pos_ = end;
      return absl::OkStatus();
    }
    if (IsNameChar(c)) {
      out->kind = Node::Kind::kRef;
      out->name = Name();
      return absl::OkStatus();
    }
    return Error(absl::StrCat("unexpected '", std::string(1, c), "'"));
  }

  // A quoted string: its characters, escapes read as the regex parser reads them.
  absl::Status Literal(Node* out) {
    size_t end = pos_ + 1;
    std::string pattern;
    while (end < t_.size() && t_[end] != '"') {
      if (t_[end] == '\\') {
        if (end + 1 >= t_.size()) return Error("unterminated string");
        pattern += t_.substr(end, 2);
        end += 2;
        continue;
      }
      // Everything else literally: regex syntax characters escaped.
      if (std::string_view("\\^$.|?*+()[]{}").find(t_[end]) != std::string_view::npos) {
        pattern += '\\';
      }
      pattern += t_[end];
      ++end;
    }
    if (end >= t_.size()) return Error("unterminated string");
    auto node = ParseRegex(pattern, limits_);
    if (!node.ok()) return Error(std::string(node.status().message()));
    out->kind = Node::Kind::kRegex;
    out->regex = *std::move(node);
    pos_ = end + 1;
    return absl::OkStatus();
  }

  std::string_view t_;
  size_t pos_ = 0;
  const Limits& limits_;
};

class Compiler {
 public:
  Compiler(const std::map<std::string, Node>& rules, NfaBuilder* nfa) : rules_(rules), nfa_(*nfa) {}

  absl::StatusOr<Frag> Compile(const Node& node) {
    if (nfa_.overflowed()) return nfa_.Empty();
    switch (node.kind) {
      case Node::Kind::kRegex:
        return CompileRegex(node.regex, &nfa_);
      case Node::Kind::kRef:
        return Ref(node.name);
      case Node::Kind::kSeq:
      case Node::Kind::kAlt: {
        std::vector<Frag> parts;
        for (const Node& c : node.children) {
          auto f = Compile(c);
          if (!f.ok()) return f;
          parts.push_back(*f);
        }
        return node.kind == Node::Kind::kSeq ? nfa_.Seq(parts) : nfa_.Alt(parts);
      }
      case Node::Kind::kRepeat:
        return Repeat(node);
    }
    return nfa_.Empty();
  }

 private:
  absl::StatusOr<Frag> Ref(const std::string& name) {
    auto it = rules_.find(name);
    if (it == rules_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", name.substr(0, 64), "' is not defined"));
    }
    int& open = open_[name];
    if (open >= kMaxRuleRecursion) return nfa_.Alt({});  // unrolled this deep: matches nothing
    ++open;
    auto f = Compile(it->second);
    --open;
    return f;
  }

  absl::StatusOr<Frag> Repeat(const Node& node) {
    std::vector<Frag> parts;
    for (int i = 0; i < node.min && !nfa_.overflowed(); ++i) {
      auto f = Compile(node.children[0]);
      if (!f.ok()) return f;
      parts.push_back(*f);
    }
    if (node.max < 0) {
      auto f = Compile(node.children[0]);
      if (!f.ok()) return f;
      parts.push_back(nfa_.Star(*f));
    } else {
      Frag tail = nfa_.Empty();
      for (int i = node.min; i < node.max && !nfa_.overflowed(); ++i) {
        auto f = Compile(node.children[0]);
        if (!f.ok()) return f;
        tail = nfa_.Optional(nfa_.Seq({*f, tail}));
      }
      parts.push_back(tail);
    }
    return nfa_.Seq(parts);
  }

  const std::map<std::string, Node>& rules_;
  NfaBuilder& nfa_;
  std::map<std::string, int> open_;
};

}  // namespace

absl::StatusOr<Frag> CompileEbnf(std::string_view text, const Limits& limits, NfaBuilder* nfa) {
  if (text.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: longer than ", limits.max_spec_bytes, " bytes"));
  }
  std::map<std::string, Node> rules;
  if (auto s = Parser(text, limits).Parse(&rules); !s.ok()) return s;
  auto root = rules.find("root");
  if (root == rules.end()) return absl::InvalidArgumentError("grammar: no rule 'root'");
  Compiler compiler(rules, nfa);
  static const std::string kRoot = "root";
  Node ref;
  ref.kind = Node::Kind::kRef;
  ref.name = kRoot;
  return compiler.Compile(ref);
}

}  // namespace strata::grammar
