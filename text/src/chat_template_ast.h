#pragma once
// Tokens and syntax tree of the chat-template Jinja interpreter, and the lexer/parser entry
// points. Positions are byte offsets into the template source; errors name line and column.
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat_template_value.h"

namespace strata::jinja {

struct Token {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,  // template structure
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof,  // inside tags
  };
  Type type;
  std::string text;  // text, name, decoded string literal, number or operator
  size_t pos;
};

// InvalidArgument "chat template line L column C: msg".
absl::Status SyntaxError(absl::string_view source, size_t pos, absl::string_view msg);

// Splits the template into tokens, applying whitespace control as Hugging Face configures
// Jinja: trim_blocks and lstrip_blocks on, '-' and '+' markers honored.
absl::StatusOr<std::vector<Token>> Lex(absl::string_view source);

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kTuple,
    kDict,
    kGetAttr,
    kGetItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kAnd,
    kOr,
    kBinary,
    kCompare,
    kCond,
  };
  Kind kind;
  size_t pos = 0;
  Value literal;
  // kName: variable; kGetAttr: attribute; kFilter/kTest: name; kBinary: operator.
  std::string name;
  // kCompare: one operator per pair of adjacent operands ("==", "in", "not in", ...).
  std::vector<std::string> ops;
  bool negated = false;  // kTest: `is not`
  // Operands. kGetItem: object, key. kSlice: object, start, stop, step (null when omitted).
  // kCall: callee, positional arguments. kFilter/kTest: subject, arguments. kDict: k0, v0, ...
  // kCond: value, condition, else-value (null when omitted).
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
};

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue };
  Kind kind;
  size_t pos = 0;
  std::string text;                  // kText
  std::unique_ptr<Expr> expr;        // kOutput value, kSet value, kFor iterable
  std::vector<std::string> targets;  // kSet/kSetBlock/kFor names; kMacro: [name, params...]
  std::string attr;                  // kSet `ns.attr`
  std::unique_ptr<Expr> filter;      // kFor `if` filter
  // kIf: condition per branch, null for `else`; bodies[k] belongs to conditions[k].
  std::vector<std::unique_ptr<Expr>> conditions;
  std::vector<std::vector<Node>> bodies;
  std::vector<Node> body;                       // kFor/kSetBlock/kMacro body
  std::vector<Node> else_body;                  // kFor `else`
  std::vector<std::unique_ptr<Expr>> defaults;  // kMacro: default per param (null if none)
};

absl::StatusOr<std::vector<Node>> Parse(absl::string_view source, std::vector<Token> tokens);

}  // namespace strata::jinja
