#include "chat_template_interp.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"

namespace strata::jinja {
namespace {

using K = Value::Kind;
constexpr int kMaxMacroDepth = 64;
constexpr uint64_t kMaxRepeat = uint64_t{1} << 24;  // elements or bytes

bool IsIntLike(const Value& v) { return v.kind == K::kInt || v.kind == K::kBool; }
int64_t IntOf(const Value& v) { return v.kind == K::kBool ? v.b : v.i; }

absl::StatusOr<Value> IntArith(const std::string& op, int64_t a, int64_t b) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(a, b, &r);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(a, b, &r);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(a, b, &r);
  } else if (op == "**") {
    if (b < 0) return Value::Float(std::pow(static_cast<double>(a), static_cast<double>(b)));
    r = 1;
    if (a == 0 || a == 1) {
      r = b == 0 ? 1 : a;
    } else if (a == -1) {
      r = b % 2 == 0 ? 1 : -1;
    } else {  // |a| >= 2 overflows within 64 steps
      for (int64_t k = 0; k < b && !overflow; ++k) overflow = __builtin_mul_overflow(r, a, &r);
    }
  }
  if (overflow) return absl::InvalidArgumentError(absl::StrCat("integer overflow in ", op));
  if (op == "+" || op == "-" || op == "*" || op == "**") return Value::Int(r);
  if (b == 0) return absl::InvalidArgumentError("division by zero");
  if (op == "/") return Value::Float(static_cast<double>(a) / static_cast<double>(b));
  if (a == INT64_MIN && b == -1) return absl::InvalidArgumentError("integer overflow");
  int64_t q = a / b;
  r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) {
    --q;
    r += b;
  }
  return op == "//" ? Value::Int(q) : Value::Int(r);
}

absl::StatusOr<Value> FloatArith(const std::string& op, double a, double b) {
  if (op == "+") return Value::Float(a + b);
  if (op == "-") return Value::Float(a - b);
  if (op == "*") return Value::Float(a * b);
  if (op == "**") return Value::Float(std::pow(a, b));
  if (b == 0) return absl::InvalidArgumentError("float division by zero");
  if (op == "/") return Value::Float(a / b);
  double q = std::floor(a / b);
  return op == "//" ? Value::Float(q) : Value::Float(a - q * b);
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.kind == K::kString ? seq.s.size() : seq.list->size();
  if (n > 0 && unit > 0 && static_cast<uint64_t>(n) > kMaxRepeat / unit) {
    return absl::InvalidArgumentError("repeated sequence too large");
  }
  if (seq.kind == K::kString) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::Str(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::MakeList(std::move(out), seq.is_tuple);
}

absl::StatusOr<Value> Arith(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::Str(ToStr(a) + ToStr(b));
  if (a.IsUndefined()) return absl::InvalidArgumentError(a.s);
  if (b.IsUndefined()) return absl::InvalidArgumentError(b.s);
  if (a.IsNumber() && b.IsNumber()) {
    if (IsIntLike(a) && IsIntLike(b)) return IntArith(op, IntOf(a), IntOf(b));
    return FloatArith(op, a.AsDouble(), b.AsDouble());
  }
  if (op == "+" && a.kind == b.kind && (a.kind == K::kString || a.kind == K::kList)) {
    if (a.kind == K::kString) return Value::Str(a.s + b.s);
    List out = *a.list;
    out.insert(out.end(), b.list->begin(), b.list->end());
    return Value::MakeList(std::move(out), a.is_tuple);
  }
  if (op == "*" && (a.kind == K::kString || a.kind == K::kList) && IsIntLike(b))
    return Repeat(a, IntOf(b));
  if (op == "*" && (b.kind == K::kString || b.kind == K::kList) && IsIntLike(a))
    return Repeat(b, IntOf(a));
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported operand types for ", op, ": ", Repr(a), " and ", Repr(b)));
}

}  // namespace

Interpreter::Interpreter(absl::string_view source, Dict globals) : src_(source) {
  Scope scope;
  for (auto& [k, v] : globals) scope[k] = std::move(v);
  scopes_.push_back(std::move(scope));
}

absl::Status Interpreter::Error(size_t pos, absl::string_view msg) const {
  return SyntaxError(src_, pos, msg);
}

absl::Status Interpreter::Wrap(size_t pos, const absl::Status& status) const {
  if (status.ok() || absl::StartsWith(status.message(), "chat template line ")) return status;
  return Error(pos, status.message());
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
}

absl::StatusOr<std::string> Interpreter::Render(const std::vector<Node>& nodes) {
  std::string out;
  STRATA_ASSIGN_OR_RETURN(Flow flow, Exec(nodes, &out));
  if (flow != Flow::kNormal) return Error(0, "break or continue outside of a loop");
  return out;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const std::vector<Node>& nodes,
                                                    std::string* out) {
  for (const Node& node : nodes) {
    STRATA_ASSIGN_OR_RETURN(Flow flow, ExecNode(node, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecNode(const Node& node, std::string* out) {
  switch (node.kind) {
    case Node::Kind::kText:
      *out += node.text;
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
      *out += ToStr(v);
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      return ExecIf(node, out);
    case Node::Kind::kFor:
      return ExecFor(node, out);
    case Node::Kind::kSet:
    case Node::Kind::kSetBlock:
      STRATA_RETURN_IF_ERROR(ExecSet(node));
      return Flow::kNormal;
    case Node::Kind::kMacro:
      Assign(node.targets[0], Value::Macro(&node));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecIf(const Node& node, std::string* out) {
  for (size_t k = 0; k < node.conditions.size(); ++k) {
    bool take = node.conditions[k] == nullptr;
    if (!take) {
      STRATA_ASSIGN_OR_RETURN(Value cond, Eval(*node.conditions[k]));
      take = Truthy(cond);
    }
    if (take) return Exec(node.bodies[k], out);
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Node& node, std::string* out) {
  STRATA_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr));
  absl::StatusOr<List> all = Iterate(iterable);
  if (!all.ok()) return Wrap(node.expr->pos, all.status());
  scopes_.emplace_back();
  absl::Status status = ExecLoopBody(node, *all, out);
  scopes_.pop_back();
  STRATA_RETURN_IF_ERROR(status);
  return Flow::kNormal;
}

absl::Status Interpreter::ExecLoopBody(const Node& node, const List& all, std::string* out) {
  auto bind = [&](const Value& item) -> absl::Status {
    if (node.targets.size() == 1) {
      Assign(node.targets[0], item);
      return absl::OkStatus();
    }
    if (item.kind != K::kList || item.list->size() != node.targets.size()) {
      return Error(node.pos, "cannot unpack loop item into the loop variables");
    }
    for (size_t k = 0; k < node.targets.size(); ++k) Assign(node.targets[k], (*item.list)[k]);
    return absl::OkStatus();
  };
  List items;
  for (const Value& item : all) {
    STRATA_RETURN_IF_ERROR(bind(item));
    bool keep = true;
    if (node.filter != nullptr) {
      STRATA_ASSIGN_OR_RETURN(Value cond, Eval(*node.filter));
      keep = Truthy(cond);
    }
    if (keep) items.push_back(item);
  }
  if (items.empty()) return Exec(node.else_body, out).status();
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    Dict loop = {{"index", Value::Int(k + 1)},    {"index0", Value::Int(k)},
                 {"revindex", Value::Int(n - k)}, {"revindex0", Value::Int(n - k - 1)},
                 {"first", Value::Bool(k == 0)},  {"last", Value::Bool(k == n - 1)},
                 {"length", Value::Int(n)},       {"depth", Value::Int(1)}};
    if (k > 0) loop.emplace_back("previtem", items[k - 1]);
    if (k + 1 < n) loop.emplace_back("nextitem", items[k + 1]);
    Assign("loop", Value::MakeDict(std::move(loop)));
    STRATA_RETURN_IF_ERROR(bind(items[k]));
    STRATA_ASSIGN_OR_RETURN(Flow flow, Exec(node.body, out));
    if (flow == Flow::kBreak) break;
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Node& node) {
  Value value;
  if (node.kind == Node::Kind::kSetBlock) {
    std::string text;
    STRATA_ASSIGN_OR_RETURN(Flow flow, Exec(node.body, &text));
    if (flow != Flow::kNormal) return Error(node.pos, "break or continue inside set block");
    value = Value::Str(std::move(text));
  } else {
    STRATA_ASSIGN_OR_RETURN(value, Eval(*node.expr));
  }
  if (!node.attr.empty()) {
    Value ns = Lookup(node.targets[0]);
    if (ns.kind != K::kDict || !ns.is_namespace) {
      return Error(node.pos, "cannot assign attribute on non-namespace object");
    }
    Value* slot = DictFindMutable(*ns.dict, node.attr);
    if (slot != nullptr) {
      *slot = std::move(value);
    } else {
      ns.dict->emplace_back(node.attr, std::move(value));
    }
    return absl::OkStatus();
  }
  if (node.targets.size() == 1) {
    Assign(node.targets[0], std::move(value));
    return absl::OkStatus();
  }
  if (value.kind != K::kList || value.list->size() != node.targets.size()) {
    return Error(node.pos, "cannot unpack value into the set targets");
  }
  for (size_t k = 0; k < node.targets.size(); ++k) Assign(node.targets[k], (*value.list)[k]);
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvalCollection(e);
    case Expr::Kind::kGetAttr:
      return EvalAttr(e);
    case Expr::Kind::kGetItem:
    case Expr::Kind::kSlice:
      return EvalItem(e);
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
      return EvalFilterOrTest(e);
    case Expr::Kind::kNot: {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!Truthy(v));
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      if (e.kind == Expr::Kind::kPos && v.IsNumber()) return v;
      absl::StatusOr<Value> r = Arith("-", Value::Int(0), v);
      if (!r.ok()) return Wrap(e.pos, r.status());
      return r;
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr:
    case Expr::Kind::kCond:
      return EvalLogical(e);
    case Expr::Kind::kBinary:
      return EvalBinary(e);
    case Expr::Kind::kCompare:
      return EvalCompare(e);
  }
  return Error(e.pos, "unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalCollection(const Expr& e) {
  if (e.kind != Expr::Kind::kDict) {
    List items;
    for (const auto& arg : e.args) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*arg));
      items.push_back(std::move(v));
    }
    return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
  }
  Dict items;
  for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
    STRATA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[k]));
    if (key.kind != K::kString) return Error(e.args[k]->pos, "dict keys must be strings");
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k + 1]));
    Value* slot = DictFindMutable(items, key.s);
    if (slot != nullptr) {
      *slot = std::move(v);
    } else {
      items.emplace_back(key.s, std::move(v));
    }
  }
  return Value::MakeDict(std::move(items));
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs a;
  for (size_t k = first; k < e.args.size(); ++k) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[k]));
    a.args.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*expr));
    a.kwargs.emplace_back(name, std::move(v));
  }
  return a;
}

absl::StatusOr<Value> Interpreter::EvalAttr(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  if (obj.IsUndefined()) return Error(e.pos, obj.s);
  return GetMember(obj, e.name);
}

absl::StatusOr<Value> Interpreter::EvalItem(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  if (obj.IsUndefined()) return Error(e.pos, obj.s);
  Value parts[3];
  for (size_t k = 1; k < e.args.size(); ++k) {
    if (e.args[k] == nullptr) continue;
    STRATA_ASSIGN_OR_RETURN(parts[k - 1], Eval(*e.args[k]));
  }
  if (e.kind == Expr::Kind::kGetItem) {
    Value v = GetItem(obj, parts[0]);
    if (v.IsUndefined() && parts[0].kind == K::kString) v = GetMember(obj, parts[0].s);
    return v;
  }
  absl::StatusOr<Value> r = Slice(obj, parts[0], parts[1], parts[2]);
  if (!r.ok()) return Wrap(e.pos, r.status());
  return r;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.args[0];
  STRATA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  if (callee.kind == Expr::Kind::kName) {
    Value fn = Lookup(callee.name);
    if (fn.kind == K::kMacro) return CallMacro(*fn.macro, args, e.pos);
    if (!fn.IsUndefined()) return Error(e.pos, absl::StrCat("'", callee.name, "' is not callable"));
    if (callee.name == "raise_exception") {
      return absl::InvalidArgumentError(args.args.empty() ? "" : ToStr(args.args[0]));
    }
    absl::StatusOr<Value> r = CallGlobal(callee.name, args);
    if (absl::IsNotFound(r.status())) return Error(e.pos, fn.s);
    if (!r.ok()) return Wrap(e.pos, r.status());
    return r;
  }
  if (callee.kind == Expr::Kind::kGetAttr) {
    STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*callee.args[0]));
    if (obj.IsUndefined()) return Error(callee.pos, obj.s);
    absl::StatusOr<Value> r = CallMethod(obj, callee.name, args);
    if (!absl::IsNotFound(r.status())) return r.ok() ? r : Wrap(e.pos, r.status());
    Value member = GetMember(obj, callee.name);
    if (member.kind == K::kMacro) return CallMacro(*member.macro, args, e.pos);
    return Error(e.pos, member.IsUndefined() ? member.s : "object is not callable");
  }
  STRATA_ASSIGN_OR_RETURN(Value fn, Eval(callee));
  if (fn.kind == K::kMacro) return CallMacro(*fn.macro, args, e.pos);
  return Error(e.pos, fn.IsUndefined() ? fn.s : "object is not callable");
}

absl::StatusOr<Value> Interpreter::CallMacro(const Node& macro, const CallArgs& args, size_t pos) {
  const size_t n_params = macro.targets.size() - 1;
  if (args.args.size() > n_params) return Error(pos, "macro called with too many arguments");
  if (depth_ >= kMaxMacroDepth) return Error(pos, "macro recursion too deep");
  std::vector<Scope> saved = std::move(scopes_);
  scopes_ = {saved.front(), Scope{}};
  ++depth_;
  absl::Status status;
  for (size_t k = 0; k < n_params && status.ok(); ++k) {
    const std::string& param = macro.targets[k + 1];
    const Value* given = args.Get(k, param);
    if (given != nullptr) {
      Assign(param, *given);
    } else if (macro.defaults[k] != nullptr) {
      absl::StatusOr<Value> dflt = Eval(*macro.defaults[k]);
      status = dflt.status();
      if (dflt.ok()) Assign(param, *std::move(dflt));
    } else {
      Assign(param, Value::Undefined(absl::StrCat("'", param, "' is undefined")));
    }
  }
  std::string out;
  if (status.ok()) status = Exec(macro.body, &out).status();
  --depth_;
  scopes_ = std::move(saved);
  STRATA_RETURN_IF_ERROR(status);
  return Value::Str(std::move(out));
}

absl::StatusOr<Value> Interpreter::EvalFilterOrTest(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value input, Eval(*e.args[0]));
  STRATA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  if (e.kind == Expr::Kind::kFilter) {
    absl::StatusOr<Value> r = ApplyFilter(e.name, input, args);
    if (!r.ok()) return Wrap(e.pos, r.status());
    return r;
  }
  absl::StatusOr<bool> r = ApplyTest(e.name, input, args);
  if (!r.ok()) return Wrap(e.pos, r.status());
  return Value::Bool(*r != e.negated);
}

absl::StatusOr<Value> Interpreter::EvalLogical(const Expr& e) {
  if (e.kind == Expr::Kind::kCond) {
    STRATA_ASSIGN_OR_RETURN(Value cond, Eval(*e.args[1]));
    if (Truthy(cond)) return Eval(*e.args[0]);
    if (e.args[2] == nullptr)
      return Value::Undefined("the inline if-expression evaluated to false");
    return Eval(*e.args[2]);
  }
  STRATA_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  if (Truthy(left) == (e.kind == Expr::Kind::kOr)) return left;
  return Eval(*e.args[1]);
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t k = 0; k < e.ops.size(); ++k) {
    STRATA_ASSIGN_OR_RETURN(Value right, Eval(*e.args[k + 1]));
    const std::string& op = e.ops[k];
    absl::StatusOr<bool> r = false;
    if (op == "==" || op == "!=") {
      r = Equals(left, right) == (op == "==");
    } else if (op == "in" || op == "not in") {
      r = Contains(right, left);
      if (r.ok() && op == "not in") r = !*r;
    } else {
      r = ApplyTest(op, left, CallArgs{{right}, {}});
    }
    if (!r.ok()) return Wrap(e.args[k + 1]->pos, r.status());
    if (!*r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
  STRATA_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
  absl::StatusOr<Value> r = Arith(e.name, a, b);
  if (!r.ok()) return Wrap(e.pos, r.status());
  return r;
}

}  // namespace strata::jinja
