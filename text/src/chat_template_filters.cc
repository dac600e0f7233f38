// Jinja filters (`x | trim`) and tests (`x is defined`) used by chat templates.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chat_template_builtins.h"
#include "strata/common/status_macros.h"

namespace strata::jinja {
namespace {

using K = Value::Kind;

absl::Status Err(absl::string_view msg) { return absl::InvalidArgumentError(msg); }

// Arguments after the first `skip` positional ones, for filters that forward to a test.
CallArgs Rest(const CallArgs& a, size_t skip) {
  CallArgs rest;
  for (size_t k = skip; k < a.args.size(); ++k) rest.args.push_back(a.args[k]);
  return rest;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// selectattr / rejectattr / select / reject.
absl::StatusOr<Value> SelectFilter(absl::string_view name, const Value& input, const CallArgs& a) {
  bool by_attr = name == "selectattr" || name == "rejectattr";
  bool keep = name == "selectattr" || name == "select";
  size_t test_index = by_attr ? 1 : 0;
  if (by_attr && (a.args.empty() || a.args[0].kind != K::kString)) {
    return Err(absl::StrCat(name, " needs an attribute name"));
  }
  std::string test = "truthy";
  if (a.args.size() > test_index) {
    if (a.args[test_index].kind != K::kString) return Err("test name must be a string");
    test = a.args[test_index].s;
  }
  CallArgs test_args = Rest(a, test_index + 1);
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
  List out;
  for (const Value& item : items) {
    Value subject = by_attr ? GetMember(item, a.args[0].s) : item;
    bool pass = Truthy(subject);
    if (test != "truthy") {
      STRATA_ASSIGN_OR_RETURN(pass, ApplyTest(test, subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> MapFilter(const Value& input, const CallArgs& a) {
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
  const Value* attr = DictFind(a.kwargs, "attribute");
  const Value* fallback = DictFind(a.kwargs, "default");
  List out;
  for (const Value& item : items) {
    if (attr != nullptr) {
      Value v = GetMember(item, ToStr(*attr));
      out.push_back(v.IsUndefined() && fallback != nullptr ? *fallback : v);
    } else {
      if (a.args.empty() || a.args[0].kind != K::kString) return Err("map needs a filter name");
      STRATA_ASSIGN_OR_RETURN(Value v, ApplyFilter(a.args[0].s, item, Rest(a, 1)));
      out.push_back(std::move(v));
    }
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> SortFilter(const Value& input, const CallArgs& a) {
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
  bool reverse = a.Get(0, "reverse") != nullptr && Truthy(*a.Get(0, "reverse"));
  bool case_sensitive =
      a.Get(1, "case_sensitive") != nullptr && Truthy(*a.Get(1, "case_sensitive"));
  const Value* attr = a.Get(2, "attribute");
  auto key = [&](const Value& v) {
    Value k = attr != nullptr ? GetMember(v, ToStr(*attr)) : v;
    if (!case_sensitive && k.kind == K::kString) k.s = Lower(k.s);
    return k;
  };
  absl::Status error;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    absl::StatusOr<int> c = Compare(key(x), key(y));
    if (!c.ok()) error = c.status();
    return c.ok() && (reverse ? *c > 0 : *c < 0);
  });
  if (!error.ok()) return error;
  return Value::MakeList(std::move(items));
}

absl::StatusOr<Value> LengthFilter(const Value& input) {
  switch (input.kind) {
    case K::kUndefined:
      return Value::Int(0);
    case K::kString:
      return Value::Int(static_cast<int64_t>(DecodeUtf8(input.s).size()));
    case K::kList:
      return Value::Int(static_cast<int64_t>(input.list->size()));
    case K::kDict:
      if (!input.is_namespace) return Value::Int(static_cast<int64_t>(input.dict->size()));
      break;
    default:
      break;
  }
  return Err(absl::StrCat("object of type '", ToStr(input), "' has no len()"));
}

absl::StatusOr<Value> JoinFilter(const Value& input, const CallArgs& a) {
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
  const Value* sep = a.Get(0, "d");
  const Value* attr = a.Get(1, "attribute");
  std::vector<std::string> parts;
  for (const Value& v : items) parts.push_back(ToStr(attr ? GetMember(v, ToStr(*attr)) : v));
  return Value::Str(absl::StrJoin(parts, sep != nullptr ? ToStr(*sep) : ""));
}

absl::StatusOr<Value> NumberFilter(bool to_int, const Value& input, const CallArgs& a) {
  const Value* fallback = a.Get(0, "default");
  Value dflt = fallback != nullptr ? *fallback : (to_int ? Value::Int(0) : Value::Float(0));
  if (input.IsNumber()) {
    return to_int ? Value::Int(static_cast<int64_t>(input.AsDouble()))
                  : Value::Float(input.AsDouble());
  }
  if (input.kind != K::kString || input.s.empty()) return dflt;
  char* end = nullptr;
  std::string text = input.s;
  double d = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return dflt;
  if (to_int && text.find_first_of(".eE") != std::string::npos) return dflt;
  return to_int ? Value::Int(static_cast<int64_t>(d)) : Value::Float(d);
}

absl::StatusOr<Value> FirstLast(bool first, const Value& input) {
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return first ? items.front() : items.back();
}

absl::StatusOr<Value> ReverseFilter(const Value& input) {
  if (input.kind == K::kString) {
    std::u32string cs = DecodeUtf8(input.s);
    std::reverse(cs.begin(), cs.end());
    return Value::Str(EncodeUtf8(cs));
  }
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
  std::reverse(items.begin(), items.end());
  return Value::MakeList(std::move(items));
}

absl::StatusOr<Value> TojsonFilter(const Value& input, const CallArgs& a) {
  const Value* indent = a.Get(0, "indent");
  int width = indent != nullptr && indent->IsNumber() ? static_cast<int>(indent->AsDouble()) : -1;
  const Value* sort_keys = DictFind(a.kwargs, "sort_keys");
  STRATA_ASSIGN_OR_RETURN(std::string json,
                          ToJson(input, width, sort_keys != nullptr && Truthy(*sort_keys)));
  return Value::Str(std::move(json));
}

absl::StatusOr<Value> ItemsFilter(const Value& input) {
  if (input.IsUndefined()) return Value::MakeList({});
  if (input.kind != K::kDict) return Err("items filter expects a mapping");
  return CallMethod(input, "items", CallArgs{});
}

absl::StatusOr<Value> StringFilter(absl::string_view name, const Value& input, const CallArgs& a) {
  CallArgs forwarded = a;
  std::string method(name);
  if (name == "trim") method = "strip";
  return CallMethod(Value::Str(ToStr(input)), method, forwarded);
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const CallArgs& a) {
  if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" ||
      name == "title" || name == "replace") {
    return StringFilter(name, input, a);
  }
  if (name == "tojson") return TojsonFilter(input, a);
  if (name == "length" || name == "count") return LengthFilter(input);
  if (name == "default" || name == "d") {
    bool boolean = a.Get(1, "boolean") != nullptr && Truthy(*a.Get(1, "boolean"));
    bool use_default = input.IsUndefined() || (boolean && !Truthy(input));
    const Value* dflt = a.Get(0, "default_value");
    return use_default ? (dflt != nullptr ? *dflt : Value::Str("")) : input;
  }
  if (name == "items") return ItemsFilter(input);
  if (name == "join") return JoinFilter(input, a);
  if (name == "string") return Value::Str(ToStr(input));
  if (name == "first" || name == "last") return FirstLast(name == "first", input);
  if (name == "list") {
    STRATA_ASSIGN_OR_RETURN(List items, Iterate(input));
    return Value::MakeList(std::move(items));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    return SelectFilter(name, input, a);
  }
  if (name == "map") return MapFilter(input, a);
  if (name == "sort") return SortFilter(input, a);
  if (name == "reverse") return ReverseFilter(input);
  if (name == "int" || name == "float") return NumberFilter(name == "int", input, a);
  if (name == "abs") {
    if (input.kind == K::kFloat) return Value::Float(std::fabs(input.f));
    if (input.IsNumber()) return Value::Int(std::llabs(input.kind == K::kBool ? input.b : input.i));
    return Err(absl::StrCat("bad operand type for abs(): '", ToStr(input), "'"));
  }
  if (name == "safe") return input;
  return Err(absl::StrCat("no filter named '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& v, const CallArgs& a) {
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.kind == K::kString;
  if (name == "mapping") return v.kind == K::kDict && !v.is_namespace;
  if (name == "iterable")
    return v.kind == K::kUndefined || v.kind == K::kString || v.kind == K::kList ||
           (v.kind == K::kDict && !v.is_namespace);
  if (name == "sequence")
    return v.kind == K::kString || v.kind == K::kList || (v.kind == K::kDict && !v.is_namespace);
  if (name == "number") return v.IsNumber();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true" || name == "false") return v.kind == K::kBool && v.b == (name == "true");
  if (name == "callable") return v.kind == K::kMacro;
  if (name == "lower" || name == "upper") {
    if (v.kind != K::kString) return false;
    STRATA_ASSIGN_OR_RETURN(Value mapped, CallMethod(v, name, CallArgs{}));
    return mapped.s == v.s;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != K::kInt && v.kind != K::kBool)
      return Err(absl::StrCat("test '", name, "' needs an integer"));
    int64_t x = v.kind == K::kBool ? v.b : v.i;
    if (name == "divisibleby") {
      const Value* d = a.Get(0, "num");
      if (d == nullptr || d->kind != K::kInt || d->i == 0)
        return Err("divisibleby needs a non-zero integer");
      return x % d->i == 0;
    }
    return (x % 2 != 0) == (name == "odd");
  }
  const Value* other = a.Get(0, "other");
  if (other == nullptr) return Err(absl::StrCat("no test named '", name, "'"));
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, *other);
  if (name == "ne" || name == "!=") return !Equals(v, *other);
  if (name == "sameas") return v.kind == other->kind && Equals(v, *other);
  if (name == "in") return Contains(*other, v);
  if (name == "lt" || name == "le" || name == "gt" || name == "ge" || name == "<" || name == "<=" ||
      name == ">" || name == ">=") {
    STRATA_ASSIGN_OR_RETURN(int c, Compare(v, *other));
    if (name == "lt" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == ">") return c > 0;
    return c >= 0;
  }
  return Err(absl::StrCat("no test named '", name, "'"));
}

}  // namespace strata::jinja
