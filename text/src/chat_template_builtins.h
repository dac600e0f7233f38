#pragma once
// Filters, tests, methods and global functions of the chat-template Jinja interpreter. Errors are
// InvalidArgument without a position; the interpreter adds the template position.
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chat_template_value.h"

namespace strata::jinja {

struct CallArgs {
  std::vector<Value> args;
  Dict kwargs;
  // The argument at `index`, or else the keyword argument `name`; nullptr when neither.
  const Value* Get(size_t index, absl::string_view name) const;
};

// Attribute / item lookup with Jinja semantics: missing members are Undefined, not errors.
Value GetMember(const Value& obj, absl::string_view name);
Value GetItem(const Value& obj, const Value& key);
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step);
// Iteration as in a `for` loop or a filter: list items, dict keys, string characters.
absl::StatusOr<List> Iterate(const Value& v);
// Python ordering for <, >, sort: numbers, strings, lists. Returns <0, 0 or >0.
absl::StatusOr<int> Compare(const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const CallArgs& a);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input, const CallArgs& a);
// str and dict methods (.strip(), .split(), .items(), .get() ...). NotFound when `obj` has no
// such method.
absl::StatusOr<Value> CallMethod(const Value& obj, absl::string_view name, const CallArgs& a);
// range, namespace, dict, strftime_now. NotFound for unknown names.
absl::StatusOr<Value> CallGlobal(absl::string_view name, const CallArgs& a);

}  // namespace strata::jinja
