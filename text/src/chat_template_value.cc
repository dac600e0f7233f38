#include "chat_template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace strata::jinja {

Value Value::Undefined(std::string hint) {
  Value v;
  v.s = std::move(hint);
  return v;
}
Value Value::None() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::Str(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(s);
  return v;
}
Value Value::MakeList(List items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<List>(std::move(items));
  v.is_tuple = tuple;
  return v;
}
Value Value::MakeDict(Dict items, bool is_namespace) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(items));
  v.is_namespace = is_namespace;
  return v;
}
Value Value::Macro(const Node* node) {
  Value v;
  v.kind = Kind::kMacro;
  v.macro = node;
  return v;
}

double Value::AsDouble() const {
  if (kind == Kind::kFloat) return f;
  if (kind == Kind::kBool) return b ? 1 : 0;
  return static_cast<double>(i);
}

const Value* DictFind(const Dict& dict, absl::string_view key) {
  for (const auto& [k, v] : dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* DictFindMutable(Dict& dict, absl::string_view key) {
  for (auto& [k, v] : dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return v.is_namespace || !v.dict->empty();
    case Value::Kind::kMacro:
      return true;
  }
  return false;
}

bool Equals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      return (a.kind == Value::Kind::kBool ? a.b : a.i) ==
             (b.kind == Value::Kind::kBool ? b.b : b.i);
    }
    return a.AsDouble() == b.AsDouble();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      return a.is_tuple == b.is_tuple &&
             std::equal(a.list->begin(), a.list->end(), b.list->begin(), b.list->end(), Equals);
    case Value::Kind::kDict:
      if (a.dict == b.dict) return true;
      if (a.is_namespace || b.is_namespace || a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = DictFind(*b.dict, k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    case Value::Kind::kMacro:
      return a.macro == b.macro;
    default:
      return false;
  }
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, laid out the way Python's float.__repr__ does.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t k = sign.size(); k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  if (exp < -4 || exp >= 16) {
    std::string mant = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&mant, ".", digits.substr(1));
    std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return absl::StrCat(sign, mant, buf);
  }
  if (exp < 0) return absl::StrCat(sign, "0.", std::string(-exp - 1, '0'), digits);
  if (digits.size() <= static_cast<size_t>(exp) + 1) {
    digits.append(exp + 1 - digits.size(), '0');
    return absl::StrCat(sign, digits, ".0");
  }
  return absl::StrCat(sign, digits.substr(0, exp + 1), ".", digits.substr(exp + 1));
}

namespace {

std::string ReprString(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == quote) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

absl::Status AppendJson(const Value& v, int indent, bool sort_keys, int depth, std::string* out);

void NewLine(int indent, int depth, std::string* out) {
  if (indent < 0) return;
  *out += '\n';
  out->append(static_cast<size_t>(indent) * depth, ' ');
}

absl::Status AppendJsonContainer(const Value& v, int indent, bool sort_keys, int depth,
                                 std::string* out) {
  bool is_list = v.kind == Value::Kind::kList;
  size_t n = is_list ? v.list->size() : v.dict->size();
  *out += is_list ? '[' : '{';
  if (n == 0) {
    *out += is_list ? ']' : '}';
    return absl::OkStatus();
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  if (!is_list) {
    for (const auto& e : *v.dict) entries.push_back(&e);
    if (sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto* a, auto* b) { return a->first < b->first; });
    }
  }
  for (size_t k = 0; k < n; ++k) {
    if (k > 0) *out += indent < 0 ? ", " : ",";
    NewLine(indent, depth + 1, out);
    if (!is_list) absl::StrAppend(out, JsonString(entries[k]->first), ": ");
    const Value& item = is_list ? (*v.list)[k] : entries[k]->second;
    absl::Status st = AppendJson(item, indent, sort_keys, depth + 1, out);
    if (!st.ok()) return st;
  }
  NewLine(indent, depth, out);
  *out += is_list ? ']' : '}';
  return absl::OkStatus();
}

absl::Status AppendJson(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  switch (v.kind) {
    case Value::Kind::kNone:
      *out += "null";
      break;
    case Value::Kind::kBool:
      *out += v.b ? "true" : "false";
      break;
    case Value::Kind::kInt:
      absl::StrAppend(out, v.i);
      break;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) {
        *out += "NaN";
      } else if (std::isinf(v.f)) {
        *out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatFloat(v.f);
      }
      break;
    case Value::Kind::kString:
      *out += JsonString(v.s);
      break;
    case Value::Kind::kList:
    case Value::Kind::kDict:
      if (v.is_namespace) return absl::InvalidArgumentError("Namespace is not JSON serializable");
      return AppendJsonContainer(v, indent, sort_keys, depth, out);
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError("Undefined is not JSON serializable");
    case Value::Kind::kMacro:
      return absl::InvalidArgumentError("Macro is not JSON serializable");
  }
  return absl::OkStatus();
}

}  // namespace

std::string Repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString:
      return ReprString(v.s);
    case Value::Kind::kList: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        absl::StrAppend(&out, k > 0 ? ", " : "", Repr((*v.list)[k]));
      }
      if (v.is_tuple && v.list->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = v.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : *v.dict) {
        absl::StrAppend(&out, first ? "" : ", ", ReprString(k), ": ", Repr(item));
        first = false;
      }
      return out + (v.is_namespace ? "}>" : "}");
    }
    default:
      return ToStr(v);
  }
}

std::string ToStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return absl::StrCat(v.i);
    case Value::Kind::kFloat:
      return FormatFloat(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kMacro:
      return "<Macro>";
    default:
      return Repr(v);
  }
}

absl::StatusOr<std::string> ToJson(const Value& v, int indent, bool sort_keys) {
  std::string out;
  absl::Status st = AppendJson(v, indent, sort_keys, 0, &out);
  if (!st.ok()) return st;
  return out;
}

std::u32string DecodeUtf8(absl::string_view s) {
  std::u32string out;
  for (size_t k = 0; k < s.size();) {
    unsigned char c = s[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k + len > s.size()) len = 1;
    char32_t cp = len == 1 ? c : (c & (0x7f >> len));
    for (int m = 1; m < len; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3f);
    out += cp;
    k += len;
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

}  // namespace strata::jinja
