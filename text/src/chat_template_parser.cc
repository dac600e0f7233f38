// Recursive-descent parser for the chat-template Jinja subset. Operator precedence follows
// Jinja: conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary <
// postfix (attribute, item, call) and filters / tests.
#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "chat_template_ast.h"
#include "strata/common/status_macros.h"

namespace strata::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;
using T = Token::Type;

ExprPtr MakeExpr(Expr::Kind kind, size_t pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  Parser(absl::string_view src, std::vector<Token> tokens) : src_(src), toks_(std::move(tokens)) {}

  absl::StatusOr<std::vector<Node>> ParseTemplate() {
    std::string stop;
    STRATA_ASSIGN_OR_RETURN(std::vector<Node> nodes, ParseBody({}, &stop));
    return nodes;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return toks_[std::min(i_ + ahead, toks_.size() - 1)];
  }
  const Token& Next() { return toks_[std::min(i_++, toks_.size() - 1)]; }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == T::kOp && Peek(ahead).text == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == T::kName && Peek(ahead).text == name;
  }
  absl::Status Error(absl::string_view msg) const { return SyntaxError(src_, Peek().pos, msg); }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kEof:
        return "end of template";
      case T::kBlockEnd:
        return "end of statement block";
      case T::kVarEnd:
        return "end of print statement";
      case T::kText:
        return "template text";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(T type, absl::string_view what) {
    if (Peek().type != type)
      return Error(absl::StrCat("expected ", what, ", got ", Describe(Peek())));
    ++i_;
    return absl::OkStatus();
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!IsOp(op)) return Error(absl::StrCat("expected '", op, "', got ", Describe(Peek())));
    ++i_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != T::kName)
      return Error(absl::StrCat("expected a name, got ", Describe(Peek())));
    return Next().text;
  }

  // Parses nodes until a `{% <stop> ...` tag (consumed up to the keyword) or the end.
  absl::StatusOr<std::vector<Node>> ParseBody(std::initializer_list<absl::string_view> stops,
                                              std::string* stop) {
    std::vector<Node> nodes;
    while (true) {
      const Token& t = Peek();
      if (t.type == T::kEof) {
        if (stops.size() == 0) return nodes;
        return Error(
            absl::StrCat("unexpected end of template, expected '", *(stops.end() - 1), "'"));
      }
      if (t.type == T::kText) {
        Node n{Node::Kind::kText, t.pos};
        n.text = Next().text;
        nodes.push_back(std::move(n));
      } else if (t.type == T::kVarBegin) {
        Node n{Node::Kind::kOutput, Next().pos};
        STRATA_ASSIGN_OR_RETURN(n.expr, ParseExpr());
        STRATA_RETURN_IF_ERROR(Expect(T::kVarEnd, "'}}'"));
        nodes.push_back(std::move(n));
      } else if (t.type == T::kBlockBegin) {
        for (absl::string_view s : stops) {
          if (IsName(s, 1)) {
            i_ += 2;
            *stop = std::string(s);
            return nodes;
          }
        }
        ++i_;
        STRATA_ASSIGN_OR_RETURN(Node n, ParseStatement());
        nodes.push_back(std::move(n));
      } else {
        return Error(absl::StrCat("unexpected ", Describe(t)));
      }
    }
  }

  absl::StatusOr<Node> ParseStatement() {
    const Token& kw = Peek();
    if (kw.type != T::kName) return Error("expected a statement name");
    if (kw.text == "if") return ParseIf();
    if (kw.text == "for") return ParseFor();
    if (kw.text == "set") return ParseSet();
    if (kw.text == "macro") return ParseMacro();
    if (kw.text == "generation") return ParseGeneration();
    if (kw.text == "break" || kw.text == "continue") {
      Node n{kw.text == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, Next().pos};
      STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
      return n;
    }
    return Error(absl::StrCat("unknown tag '", kw.text, "'"));
  }

  absl::StatusOr<Node> ParseIf() {
    Node n{Node::Kind::kIf, Next().pos};
    std::string stop = "elif";
    while (stop == "elif") {
      STRATA_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpr());
      STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
      STRATA_ASSIGN_OR_RETURN(std::vector<Node> body, ParseBody({"elif", "else", "endif"}, &stop));
      n.conditions.push_back(std::move(cond));
      n.bodies.push_back(std::move(body));
    }
    if (stop == "else") {
      STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
      STRATA_ASSIGN_OR_RETURN(std::vector<Node> body, ParseBody({"endif"}, &stop));
      n.conditions.push_back(nullptr);
      n.bodies.push_back(std::move(body));
    }
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    return n;
  }

  absl::StatusOr<Node> ParseFor() {
    Node n{Node::Kind::kFor, Next().pos};
    do {
      STRATA_ASSIGN_OR_RETURN(std::string target, ExpectName());
      n.targets.push_back(std::move(target));
    } while (IsOp(",") && (++i_, true));
    if (!IsName("in")) return Error("expected 'in' in for loop");
    ++i_;
    STRATA_ASSIGN_OR_RETURN(n.expr, ParseExpr(/*allow_cond=*/false));
    if (IsName("if")) {
      ++i_;
      STRATA_ASSIGN_OR_RETURN(n.filter, ParseExpr(/*allow_cond=*/false));
    }
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    std::string stop;
    STRATA_ASSIGN_OR_RETURN(n.body, ParseBody({"else", "endfor"}, &stop));
    if (stop == "else") {
      STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
      STRATA_ASSIGN_OR_RETURN(n.else_body, ParseBody({"endfor"}, &stop));
    }
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    return n;
  }

  absl::StatusOr<Node> ParseSet() {
    Node n{Node::Kind::kSet, Next().pos};
    STRATA_ASSIGN_OR_RETURN(std::string target, ExpectName());
    n.targets.push_back(std::move(target));
    if (IsOp(".")) {
      ++i_;
      STRATA_ASSIGN_OR_RETURN(n.attr, ExpectName());
    } else {
      while (IsOp(",")) {
        ++i_;
        STRATA_ASSIGN_OR_RETURN(std::string more, ExpectName());
        n.targets.push_back(std::move(more));
      }
    }
    if (!IsOp("=")) {
      if (!n.attr.empty() || n.targets.size() != 1) return Error("expected '='");
      n.kind = Node::Kind::kSetBlock;
      STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
      std::string stop;
      STRATA_ASSIGN_OR_RETURN(n.body, ParseBody({"endset"}, &stop));
      STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
      return n;
    }
    ++i_;
    STRATA_ASSIGN_OR_RETURN(n.expr, ParseTuple());
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    return n;
  }

  // HF's `{% generation %}` marks assistant text for token masks; it renders its body as is.
  absl::StatusOr<Node> ParseGeneration() {
    Node n{Node::Kind::kIf, Next().pos};
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    std::string stop;
    STRATA_ASSIGN_OR_RETURN(std::vector<Node> body, ParseBody({"endgeneration"}, &stop));
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    n.conditions.push_back(nullptr);
    n.bodies.push_back(std::move(body));
    return n;
  }

  absl::StatusOr<Node> ParseMacro() {
    Node n{Node::Kind::kMacro, Next().pos};
    STRATA_ASSIGN_OR_RETURN(std::string name, ExpectName());
    n.targets.push_back(std::move(name));
    STRATA_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      STRATA_ASSIGN_OR_RETURN(std::string param, ExpectName());
      n.targets.push_back(std::move(param));
      ExprPtr def;
      if (IsOp("=")) {
        ++i_;
        STRATA_ASSIGN_OR_RETURN(def, ParseExpr());
      }
      n.defaults.push_back(std::move(def));
      if (!IsOp(")")) STRATA_RETURN_IF_ERROR(ExpectOp(","));
    }
    ++i_;
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    std::string stop;
    STRATA_ASSIGN_OR_RETURN(n.body, ParseBody({"endmacro"}, &stop));
    if (Peek().type == T::kName) ++i_;  // optional macro name after endmacro
    STRATA_RETURN_IF_ERROR(Expect(T::kBlockEnd, "'%}'"));
    return n;
  }

  // `a, b` without parentheses (set values) becomes a tuple.
  absl::StatusOr<ExprPtr> ParseTuple() {
    size_t pos = Peek().pos;
    STRATA_ASSIGN_OR_RETURN(ExprPtr first, ParseExpr());
    if (!IsOp(",")) return first;
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, pos);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      STRATA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
      tuple->args.push_back(std::move(item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpr(bool allow_cond = true) {
    STRATA_ASSIGN_OR_RETURN(ExprPtr value, ParseOr());
    while (allow_cond && IsName("if")) {
      ExprPtr cond = MakeExpr(Expr::Kind::kCond, Next().pos);
      STRATA_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (IsName("else")) {
        ++i_;
        STRATA_ASSIGN_OR_RETURN(otherwise, ParseExpr());
      }
      cond->args.push_back(std::move(value));
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(otherwise));
      value = std::move(cond);
    }
    return value;
  }

  absl::StatusOr<ExprPtr> ParseOr() { return ParseLogical("or", Expr::Kind::kOr); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseLogical("and", Expr::Kind::kAnd); }

  absl::StatusOr<ExprPtr> ParseLogical(absl::string_view op, Expr::Kind kind) {
    auto operand = [&]() { return kind == Expr::Kind::kOr ? ParseAnd() : ParseNot(); };
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, operand());
    while (IsName(op)) {
      ExprPtr e = MakeExpr(kind, Next().pos);
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, operand());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    ExprPtr e = MakeExpr(Expr::Kind::kNot, Next().pos);
    STRATA_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    e->args.push_back(std::move(operand));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    size_t pos = Peek().pos;
    STRATA_ASSIGN_OR_RETURN(ExprPtr first, ParseBinary(0));
    ExprPtr cmp = MakeExpr(Expr::Kind::kCompare, pos);
    cmp->args.push_back(std::move(first));
    while (true) {
      std::string op;
      if (Peek().type == T::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        op = Next().text;
      } else if (IsName("not") && IsName("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      STRATA_ASSIGN_OR_RETURN(ExprPtr operand, ParseBinary(0));
      cmp->ops.push_back(std::move(op));
      cmp->args.push_back(std::move(operand));
    }
    if (cmp->ops.empty()) return std::move(cmp->args[0]);
    return cmp;
  }

  // Binary levels, loosest first: + -, ~, * / // %, **.
  absl::StatusOr<ExprPtr> ParseBinary(int level) {
    static const std::vector<std::vector<absl::string_view>> kLevels = {
        {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    if (level == static_cast<int>(kLevels.size())) return ParseUnary();
    STRATA_ASSIGN_OR_RETURN(ExprPtr left, ParseBinary(level + 1));
    while (true) {
      bool matched = false;
      for (absl::string_view op : kLevels[level]) matched = matched || IsOp(op);
      if (!matched) return left;
      ExprPtr e = MakeExpr(Expr::Kind::kBinary, Peek().pos);
      e->name = Next().text;
      STRATA_ASSIGN_OR_RETURN(ExprPtr right, ParseBinary(level + 1));
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter = true) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Expr::Kind kind = IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos;
      node = MakeExpr(kind, Next().pos);
      STRATA_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      STRATA_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    STRATA_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) return ParseFilters(std::move(node));
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t.pos);
    switch (t.type) {
      case T::kName:
        return ParseNamePrimary();
      case T::kString:
        while (Peek().type == T::kString) e->literal.s += Next().text;
        e->literal.kind = Value::Kind::kString;
        return e;
      case T::kInt:
        e->literal = Value::Int(std::strtoll(Next().text.c_str(), nullptr, 10));
        return e;
      case T::kFloat:
        e->literal = Value::Float(std::strtod(Next().text.c_str(), nullptr));
        return e;
      default:
        break;
    }
    if (IsOp("(")) return ParseParen();
    if (IsOp("[")) return ParseSequence(Expr::Kind::kList, "]");
    if (IsOp("{")) return ParseDictLiteral();
    return Error(absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> ParseNamePrimary() {
    const Token& t = Next();
    ExprPtr e = MakeExpr(Expr::Kind::kLiteral, t.pos);
    if (t.text == "true" || t.text == "True") {
      e->literal = Value::Bool(true);
    } else if (t.text == "false" || t.text == "False") {
      e->literal = Value::Bool(false);
    } else if (t.text == "none" || t.text == "None") {
      e->literal = Value::None();
    } else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    return e;
  }

  absl::StatusOr<ExprPtr> ParseParen() {
    size_t pos = Next().pos;
    if (IsOp(")")) {
      ++i_;
      return MakeExpr(Expr::Kind::kTuple, pos);
    }
    STRATA_ASSIGN_OR_RETURN(ExprPtr first, ParseExpr());
    if (IsOp(")")) {
      ++i_;
      return first;
    }
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, pos);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (IsOp(")")) break;
      STRATA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
      tuple->args.push_back(std::move(item));
    }
    STRATA_RETURN_IF_ERROR(ExpectOp(")"));
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseSequence(Expr::Kind kind, absl::string_view close) {
    ExprPtr e = MakeExpr(kind, Next().pos);
    while (!IsOp(close)) {
      STRATA_ASSIGN_OR_RETURN(ExprPtr item, ParseExpr());
      e->args.push_back(std::move(item));
      if (!IsOp(close)) STRATA_RETURN_IF_ERROR(ExpectOp(","));
    }
    ++i_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParseDictLiteral() {
    ExprPtr e = MakeExpr(Expr::Kind::kDict, Next().pos);
    while (!IsOp("}")) {
      STRATA_ASSIGN_OR_RETURN(ExprPtr key, ParseExpr());
      STRATA_RETURN_IF_ERROR(ExpectOp(":"));
      STRATA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
      e->args.push_back(std::move(key));
      e->args.push_back(std::move(value));
      if (!IsOp("}")) STRATA_RETURN_IF_ERROR(ExpectOp(","));
    }
    ++i_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        ExprPtr e = MakeExpr(Expr::Kind::kGetAttr, Next().pos);
        if (Peek().type != T::kName && Peek().type != T::kInt)
          return Error("expected attribute name");
        e->name = Next().text;
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (IsOp("[")) {
        STRATA_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ExprPtr e = MakeExpr(Expr::Kind::kCall, node->pos);
        e->args.push_back(std::move(node));
        STRATA_RETURN_IF_ERROR(ParseCallArgs(e.get()));
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr object) {
    size_t pos = Next().pos;
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        ++i_;
        is_slice = true;
        if (++part > 2) return Error("too many ':' in slice");
        continue;
      }
      if (parts[part]) return Error("expected ']'");
      STRATA_ASSIGN_OR_RETURN(parts[part], ParseExpr());
    }
    ++i_;
    ExprPtr e = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, pos);
    e->args.push_back(std::move(object));
    if (!is_slice && !parts[0]) return SyntaxError(src_, pos, "empty subscript");
    for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
    return e;
  }

  absl::Status ParseCallArgs(Expr* call) {
    STRATA_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (Peek().type == T::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++i_;
        STRATA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        STRATA_ASSIGN_OR_RETURN(ExprPtr value, ParseExpr());
        call->args.push_back(std::move(value));
      }
      if (!IsOp(")")) STRATA_RETURN_IF_ERROR(ExpectOp(","));
    }
    ++i_;
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr node) {
    while (IsOp("|") || IsName("is")) {
      bool is_test = IsName("is");
      ExprPtr e = MakeExpr(is_test ? Expr::Kind::kTest : Expr::Kind::kFilter, Next().pos);
      if (is_test && IsName("not")) {
        e->negated = true;
        ++i_;
      }
      STRATA_ASSIGN_OR_RETURN(e->name, ExpectName());
      e->args.push_back(std::move(node));
      if (IsOp("(")) {
        STRATA_RETURN_IF_ERROR(ParseCallArgs(e.get()));
      } else if (is_test && StartsTestArgument()) {
        STRATA_ASSIGN_OR_RETURN(ExprPtr arg, ParseUnary(false));
        e->args.push_back(std::move(arg));
      }
      node = std::move(e);
    }
    return node;
  }

  // `x is divisibleby 3`: a test takes one bare argument when an operand follows.
  bool StartsTestArgument() const {
    const Token& t = Peek();
    if (t.type == T::kString || t.type == T::kInt || t.type == T::kFloat) return true;
    if (t.type == T::kOp) return t.text == "[" || t.text == "{" || t.text == "-";
    if (t.type != T::kName) return false;
    for (absl::string_view kw : {"else", "or", "and", "if", "in", "not", "is"}) {
      if (t.text == kw) return false;
    }
    return true;
  }

  absl::string_view src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Node>> Parse(absl::string_view source, std::vector<Token> tokens) {
  return Parser(source, std::move(tokens)).ParseTemplate();
}

}  // namespace strata::jinja
