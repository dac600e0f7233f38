#include "chat_template_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "strata/common/status_macros.h"

namespace strata::jinja {
namespace {

using K = Value::Kind;
constexpr char kPySpace[] = " \t\n\r\f\v";

absl::Status Err(absl::string_view msg) { return absl::InvalidArgumentError(msg); }

absl::string_view TypeName(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return "Undefined";
    case K::kNone:
      return "NoneType";
    case K::kBool:
      return "bool";
    case K::kInt:
      return "int";
    case K::kFloat:
      return "float";
    case K::kString:
      return "str";
    case K::kList:
      return v.is_tuple ? "tuple" : "list";
    case K::kDict:
      return v.is_namespace ? "Namespace" : "dict";
    case K::kMacro:
      return "Macro";
  }
  return "object";
}

absl::StatusOr<std::string> StrArg(const CallArgs& a, size_t index, absl::string_view name,
                                   absl::string_view fallback, bool* given = nullptr) {
  const Value* v = a.Get(index, name);
  if (given != nullptr) *given = v != nullptr && v->kind != K::kNone;
  if (v == nullptr || v->kind == K::kNone) return std::string(fallback);
  if (v->kind != K::kString) return Err(absl::StrCat("expected a string for '", name, "'"));
  return v->s;
}

int64_t IntArg(const CallArgs& a, size_t index, absl::string_view name, int64_t fallback) {
  const Value* v = a.Get(index, name);
  if (v == nullptr || !v->IsNumber()) return fallback;
  return v->kind == K::kFloat ? static_cast<int64_t>(v->f) : (v->kind == K::kBool ? v->b : v->i);
}

std::string PyStrip(absl::string_view s, absl::string_view chars, bool left, bool right) {
  std::u32string cs = DecodeUtf8(s), set = DecodeUtf8(chars);
  size_t b = 0, e = cs.size();
  while (left && b < e && set.find(cs[b]) != std::u32string::npos) ++b;
  while (right && e > b && set.find(cs[e - 1]) != std::u32string::npos) --e;
  return EncodeUtf8(std::u32string_view(cs).substr(b, e - b));
}

List PySplit(const std::string& s, const std::string* sep, int64_t maxsplit) {
  List out;
  size_t pos = 0;
  if (sep == nullptr) {
    while (true) {
      pos = s.find_first_not_of(kPySpace, pos);
      if (pos == std::string::npos) break;
      size_t end = s.find_first_of(kPySpace, pos);
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) end = std::string::npos;
      if (end == std::string::npos) {
        out.push_back(Value::Str(PyStrip(s.substr(pos), kPySpace, false, true)));
        break;
      }
      out.push_back(Value::Str(s.substr(pos, end - pos)));
      pos = end;
    }
    return out;
  }
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t next = s.find(*sep, pos);
    if (next == std::string::npos) break;
    out.push_back(Value::Str(s.substr(pos, next - pos)));
    pos = next + sep->size();
  }
  out.push_back(Value::Str(s.substr(pos)));
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t next = s.find(from, pos);
    if (next == std::string::npos) break;
    absl::StrAppend(&out, s.substr(pos, next - pos), to);
    pos = next + from.size();
  }
  return out + s.substr(pos);
}

std::string MapAscii(std::string s, int (*fn)(int)) {
  for (char& c : s) c = static_cast<char>(fn(static_cast<unsigned char>(c)));
  return s;
}

std::string Capitalize(const std::string& s) {
  std::string out = MapAscii(s, ::tolower);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_alpha = false;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    c = static_cast<char>(prev_alpha ? std::tolower(u) : std::toupper(u));
    prev_alpha = std::isalpha(u) != 0;
  }
  return out;
}

bool AffixMatch(const Value& arg, const std::string& s, bool prefix) {
  auto one = [&](const std::string& affix) {
    if (affix.size() > s.size()) return false;
    return prefix ? s.compare(0, affix.size(), affix) == 0
                  : s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
  };
  if (arg.kind == K::kString) return one(arg.s);
  if (arg.kind != K::kList) return false;
  for (const Value& v : *arg.list) {
    if (v.kind == K::kString && one(v.s)) return true;
  }
  return false;
}

absl::StatusOr<Value> StringMethod(const std::string& s, absl::string_view name,
                                   const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    STRATA_ASSIGN_OR_RETURN(std::string chars, StrArg(a, 0, "chars", kPySpace));
    return Value::Str(PyStrip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    bool has_sep = false;
    STRATA_ASSIGN_OR_RETURN(std::string sep, StrArg(a, 0, "sep", "", &has_sep));
    if (has_sep && sep.empty()) return Err("empty separator");
    return Value::MakeList(PySplit(s, has_sep ? &sep : nullptr, IntArg(a, 1, "maxsplit", -1)));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* arg = a.Get(0, "prefix");
    if (arg == nullptr) return Err(absl::StrCat(name, "() takes at least 1 argument"));
    return Value::Bool(AffixMatch(*arg, s, name == "startswith"));
  }
  if (name == "upper") return Value::Str(MapAscii(s, ::toupper));
  if (name == "lower") return Value::Str(MapAscii(s, ::tolower));
  if (name == "title") return Value::Str(Title(s));
  if (name == "capitalize") return Value::Str(Capitalize(s));
  if (name == "replace") {
    STRATA_ASSIGN_OR_RETURN(std::string from, StrArg(a, 0, "old", ""));
    STRATA_ASSIGN_OR_RETURN(std::string to, StrArg(a, 1, "new", ""));
    return Value::Str(Replace(s, from, to, IntArg(a, 2, "count", -1)));
  }
  if (name == "find") {
    STRATA_ASSIGN_OR_RETURN(std::string sub, StrArg(a, 0, "sub", ""));
    size_t at = s.find(sub);
    if (at == std::string::npos) return Value::Int(-1);
    return Value::Int(static_cast<int64_t>(DecodeUtf8(s.substr(0, at)).size()));
  }
  if (name == "join") {
    const Value* arg = a.Get(0, "iterable");
    if (arg == nullptr) return Err("join() takes exactly one argument");
    STRATA_ASSIGN_OR_RETURN(List items, Iterate(*arg));
    std::vector<std::string> parts;
    for (const Value& v : items) parts.push_back(ToStr(v));
    return Value::Str(absl::StrJoin(parts, s));
  }
  return absl::NotFoundError(name);
}

absl::StatusOr<Value> DictMethod(const Value& d, absl::string_view name, const CallArgs& a) {
  if (name == "get") {
    const Value* key = a.Get(0, "key");
    if (key == nullptr) return Err("get() takes at least 1 argument");
    Value found = GetItem(d, *key);
    if (!found.IsUndefined()) return found;
    const Value* fallback = a.Get(1, "default");
    return fallback != nullptr ? *fallback : Value::None();
  }
  if (name != "items" && name != "keys" && name != "values") return absl::NotFoundError(name);
  List out;
  for (const auto& [k, v] : *d.dict) {
    if (name == "items") {
      out.push_back(Value::MakeList({Value::Str(k), v}, /*tuple=*/true));
    } else {
      out.push_back(name == "keys" ? Value::Str(k) : v);
    }
  }
  return Value::MakeList(std::move(out));
}

}  // namespace

const Value* CallArgs::Get(size_t index, absl::string_view name) const {
  if (index < args.size()) return &args[index];
  return DictFind(kwargs, name);
}

Value GetMember(const Value& obj, absl::string_view name) {
  if (obj.kind == K::kDict) {
    const Value* v = DictFind(*obj.dict, name);
    if (v != nullptr) return *v;
  } else if (obj.kind == K::kList && !name.empty() && std::isdigit(name[0])) {
    return GetItem(obj, Value::Int(std::atoll(std::string(name).c_str())));
  }
  return Value::Undefined(
      absl::StrCat("'", TypeName(obj), " object' has no attribute '", name, "'"));
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.kind == K::kDict && key.kind == K::kString) {
    const Value* v = DictFind(*obj.dict, key.s);
    if (v != nullptr) return *v;
  } else if ((obj.kind == K::kList || obj.kind == K::kString) &&
             (key.kind == K::kInt || key.kind == K::kBool)) {
    int64_t idx = key.kind == K::kBool ? key.b : key.i;
    if (obj.kind == K::kList) {
      int64_t n = static_cast<int64_t>(obj.list->size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return (*obj.list)[idx];
    } else {
      std::u32string cs = DecodeUtf8(obj.s);
      int64_t n = static_cast<int64_t>(cs.size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return Value::Str(EncodeUtf8(cs.substr(idx, 1)));
    }
  }
  return Value::Undefined(absl::StrCat("'", TypeName(obj), " object' has no item ", Repr(key)));
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step) {
  auto as_int = [](const Value& v, int64_t fallback) -> absl::StatusOr<int64_t> {
    if (v.IsUndefined() || v.kind == K::kNone) return fallback;
    if (v.kind != K::kInt && v.kind != K::kBool) return Err("slice indices must be integers");
    return v.kind == K::kBool ? v.b : v.i;
  };
  STRATA_ASSIGN_OR_RETURN(int64_t st, as_int(step, 1));
  if (st == 0) return Err("slice step cannot be zero");
  std::u32string cs;
  int64_t n = 0;
  if (obj.kind == K::kString) {
    cs = DecodeUtf8(obj.s);
    n = static_cast<int64_t>(cs.size());
  } else if (obj.kind == K::kList) {
    n = static_cast<int64_t>(obj.list->size());
  } else {
    return Err(absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
  }
  auto clamp = [&](int64_t i) {
    if (i < 0) i += n;
    return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  STRATA_ASSIGN_OR_RETURN(int64_t b, as_int(start, st > 0 ? 0 : n - 1));
  STRATA_ASSIGN_OR_RETURN(int64_t e, as_int(stop, st > 0 ? n : -n - 1));
  b = clamp(b);
  e = clamp(e);
  List items;
  std::u32string chars;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.kind == K::kString) {
      chars += cs[i];
    } else {
      items.push_back((*obj.list)[i]);
    }
  }
  if (obj.kind == K::kString) return Value::Str(EncodeUtf8(chars));
  return Value::MakeList(std::move(items), obj.is_tuple);
}

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind) {
    case K::kUndefined:
      return List{};
    case K::kList:
      return *v.list;
    case K::kDict: {
      if (v.is_namespace) break;
      List keys;
      for (const auto& [k, item] : *v.dict) keys.push_back(Value::Str(k));
      return keys;
    }
    case K::kString: {
      List chars;
      for (char32_t c : DecodeUtf8(v.s)) chars.push_back(Value::Str(EncodeUtf8({&c, 1})));
      return chars;
    }
    default:
      break;
  }
  return Err(absl::StrCat("'", TypeName(v), "' object is not iterable"));
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (Equals(a, b)) return 0;
    return a.AsDouble() < b.AsDouble() ? -1 : 1;
  }
  if (a.kind == K::kString && b.kind == K::kString)
    return a.s.compare(b.s) < 0 ? -1 : (a.s == b.s ? 0 : 1);
  if (a.kind == K::kList && b.kind == K::kList) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      STRATA_ASSIGN_OR_RETURN(int c, Compare((*a.list)[k], (*b.list)[k]));
      if (c != 0) return c;
    }
    return a.list->size() < b.list->size() ? -1 : (a.list->size() == b.list->size() ? 0 : 1);
  }
  return Err(absl::StrCat("'<' not supported between instances of '", TypeName(a), "' and '",
                          TypeName(b), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.kind == K::kString) {
    if (item.kind != K::kString) return Err("'in <string>' requires string as left operand");
    return container.s.find(item.s) != std::string::npos;
  }
  if (container.kind == K::kDict)
    return item.kind == K::kString && DictFind(*container.dict, item.s);
  STRATA_ASSIGN_OR_RETURN(List items, Iterate(container));
  return std::any_of(items.begin(), items.end(), [&](const Value& v) { return Equals(v, item); });
}

absl::StatusOr<Value> CallMethod(const Value& obj, absl::string_view name, const CallArgs& a) {
  if (obj.kind == K::kString) return StringMethod(obj.s, name, a);
  if (obj.kind == K::kDict && !obj.is_namespace) return DictMethod(obj, name, a);
  return absl::NotFoundError(name);
}

absl::StatusOr<Value> CallGlobal(absl::string_view name, const CallArgs& a) {
  if (name == "namespace" || name == "dict") {
    Dict items;
    if (!a.args.empty() && a.args[0].kind == K::kDict) items = *a.args[0].dict;
    for (const auto& kv : a.kwargs) items.push_back(kv);
    return Value::MakeDict(std::move(items), name == "namespace");
  }
  if (name == "range") {
    if (a.args.empty()) return Err("range expected at least 1 argument");
    int64_t start = a.args.size() > 1 ? IntArg(a, 0, "", 0) : 0;
    int64_t stop = a.args.size() > 1 ? IntArg(a, 1, "", 0) : IntArg(a, 0, "", 0);
    int64_t step = a.args.size() > 2 ? IntArg(a, 2, "", 1) : 1;
    if (step == 0) return Err("range() arg 3 must not be zero");
    if ((stop - start) / step > 100000) return Err("range too big");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
    return Value::MakeList(std::move(out));
  }
  if (name == "strftime_now") {
    STRATA_ASSIGN_OR_RETURN(std::string format, StrArg(a, 0, "format", ""));
    return Value::Str(absl::FormatTime(format, absl::Now(), absl::LocalTimeZone()));
  }
  return absl::NotFoundError(name);
}

}  // namespace strata::jinja
