#pragma once
// Tree-walking interpreter for parsed chat templates.
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat_template_ast.h"
#include "chat_template_builtins.h"
#include "chat_template_value.h"

namespace strata::jinja {

// Renders one template once. Not thread-safe; make one per render (it is cheap).
class Interpreter {
 public:
  // `source` is used for error positions and must outlive the interpreter.
  Interpreter(absl::string_view source, Dict globals);

  // Errors: InvalidArgument "chat template line L column C: ..." for runtime errors, or the
  // exact message passed to raise_exception().
  absl::StatusOr<std::string> Render(const std::vector<Node>& nodes);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = absl::flat_hash_map<std::string, Value>;

  absl::Status Error(size_t pos, absl::string_view msg) const;
  absl::Status Wrap(size_t pos, const absl::Status& status) const;
  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value) { scopes_.back()[name] = std::move(value); }

  absl::StatusOr<Flow> Exec(const std::vector<Node>& nodes, std::string* out);
  absl::StatusOr<Flow> ExecNode(const Node& node, std::string* out);
  absl::StatusOr<Flow> ExecIf(const Node& node, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Node& node, std::string* out);
  absl::Status ExecLoopBody(const Node& node, const List& items, std::string* out);
  absl::Status ExecSet(const Node& node);

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first);
  absl::StatusOr<Value> EvalAttr(const Expr& e);
  absl::StatusOr<Value> EvalItem(const Expr& e);
  absl::StatusOr<Value> EvalCall(const Expr& e);
  absl::StatusOr<Value> EvalFilterOrTest(const Expr& e);
  absl::StatusOr<Value> EvalLogical(const Expr& e);
  absl::StatusOr<Value> EvalCompare(const Expr& e);
  absl::StatusOr<Value> EvalBinary(const Expr& e);
  absl::StatusOr<Value> EvalCollection(const Expr& e);
  absl::StatusOr<Value> CallMacro(const Node& macro, const CallArgs& args, size_t pos);

  absl::string_view src_;
  std::vector<Scope> scopes_;
  int depth_ = 0;
};

}  // namespace strata::jinja
