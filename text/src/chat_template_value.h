#pragma once
// Values of the chat-template Jinja interpreter, with Python semantics where templates observe
// them: str()/repr() formatting, truthiness, equality, json.dumps (as HF's `tojson` calls it).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace strata::jinja {

struct Node;
struct Value;
using List = std::vector<Value>;
// Insertion-ordered like a Python dict; keys are strings (JSON objects, dict literals, kwargs).
using Dict = std::vector<std::pair<std::string, Value>>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kMacro };

  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value Str(std::string s);
  static Value MakeList(List items, bool tuple = false);
  static Value MakeDict(Dict items, bool is_namespace = false);
  static Value Macro(const Node* node);

  bool IsUndefined() const { return kind == Kind::kUndefined; }
  bool IsNumber() const {
    return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat;
  }
  double AsDouble() const;

  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value, or for undefined a description of what was missing
  // Lists and dicts are shared so that namespace() attribute sets are visible through aliases.
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  bool is_tuple = false;
  bool is_namespace = false;
  const Node* macro = nullptr;
};

template <typename Json>
Value FromJson(const Json& j) {
  if (j.is_null()) return Value::None();
  if (j.is_boolean()) return Value::Bool(j.template get<bool>());
  if (j.is_number_integer()) return Value::Int(j.template get<int64_t>());
  if (j.is_number()) return Value::Float(j.template get<double>());
  if (j.is_string()) return Value::Str(j.template get<std::string>());
  if (j.is_array()) {
    List items;
    for (const auto& e : j) items.push_back(FromJson(e));
    return Value::MakeList(std::move(items));
  }
  Dict items;
  for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), FromJson(it.value()));
  return Value::MakeDict(std::move(items));
}

// Finds `key` in a dict; nullptr when absent.
const Value* DictFind(const Dict& dict, absl::string_view key);
Value* DictFindMutable(Dict& dict, absl::string_view key);

bool Truthy(const Value& v);
bool Equals(const Value& a, const Value& b);
// Python's str(v) (undefined renders empty) and repr(v).
std::string ToStr(const Value& v);
std::string Repr(const Value& v);
std::string FormatFloat(double d);
// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0 is None.
absl::StatusOr<std::string> ToJson(const Value& v, int indent, bool sort_keys);

// UTF-8 <-> code points, so that len(), indexing and slicing count characters as Python does.
std::u32string DecodeUtf8(absl::string_view s);
std::string EncodeUtf8(std::u32string_view s);

}  // namespace strata::jinja
