#include "src/json_schema.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/regex.h"
#include "strata/common/json_limits.h"

namespace strata::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Regexes of the supported string formats (RFC 3339 date/time, RFC 4122 uuid, dotted IPv4).
constexpr std::string_view kDate = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
constexpr std::string_view kTime =
    R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
constexpr std::string_view kUuid =
    R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})";
constexpr std::string_view kIpv4Octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";

bool IsAnnotation(std::string_view key) {
  static constexpr std::string_view kIgnored[] = {
      "title", "description", "default", "examples", "$schema", "$id", "$comment",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  return std::find(std::begin(kIgnored), std::end(kIgnored), key) != std::end(kIgnored);
}

bool IsHandled(std::string_view key) {
  static constexpr std::string_view kHandled[] = {
      "type", "properties", "required", "additionalProperties", "items", "minItems",
      "maxItems", "minLength", "maxLength", "pattern", "format", "enum", "const", "anyOf",
      "oneOf", "allOf", "$ref"};
  return std::find(std::begin(kHandled), std::end(kHandled), key) != std::end(kHandled);
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const Limits& limits, NfaBuilder* nfa)
      : root_(root), limits_(limits), nfa_(*nfa) {}

  absl::StatusOr<Frag> Value(const Json& s, int depth) {
    if (depth > limits_.max_nesting) {
      return Bad(absl::StrCat("nests deeper than ", limits_.max_nesting,
                              " levels (a recursive $ref is not supported)"));
    }
    if (nfa_.overflowed()) return TooLarge();
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Bad("the schema `false` admits no value");
      return AnyValue(limits_.json_object_depth);
    }
    if (!s.is_object()) return Bad("every schema must be an object or a boolean");
    if (auto st = CheckKeywords(s); !st.ok()) return st;
    if (auto it = s.find("$ref"); it != s.end()) return Ref(*it, depth);
    if (auto it = s.find("const"); it != s.end()) return nfa_.Literal(it->dump());
    if (auto it = s.find("enum"); it != s.end()) return Enum(*it);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) return AnyOf(*it, key, depth);
    }
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1) return Bad("allOf is supported with one schema only");
      return Value((*it)[0], depth + 1);
    }
    return Typed(s, depth);
  }

  Frag AnyValue(int depth) {
    std::vector<Frag> options = {String(), Number(false), nfa_.Literal("true"),
                                 nfa_.Literal("false"), nfa_.Literal("null")};
    if (depth > 0) {
      options.push_back(AnyObject(depth));
      options.push_back(AnyArray(depth));
    }
    return nfa_.Alt(options);
  }

  Frag AnyObject(int depth) {
    Frag kv = nfa_.Seq({String(), Ws(), nfa_.Literal(":"), Ws(), AnyValue(depth - 1)});
    return Container('{', nfa_.Optional(nfa_.SepList(kv, Sep())), '}');
  }

 private:
  absl::Status Bad(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", std::string(what)));
  }
  absl::Status TooLarge() const {
    return absl::InvalidArgumentError(absl::StrCat(
        "json_schema: the schema is too large (its automaton exceeds ", limits_.max_nfa_states,
        " states)"));
  }

  absl::Status CheckKeywords(const Json& s) const {
    std::vector<std::string> unsupported;
    for (const auto& [key, value] : s.items()) {
      if (!IsAnnotation(key) && !IsHandled(key)) unsupported.push_back(key.substr(0, 64));
    }
    if (unsupported.empty()) return absl::OkStatus();
    return Bad(absl::StrCat("unsupported keyword", unsupported.size() > 1 ? "s" : "", ": ",
                            absl::StrJoin(unsupported, ", ")));
  }

  Frag Ws() {
    Frag ws = nfa_.Empty();
    for (int i = 0; i < kMaxJsonWhitespace; ++i) {
      Frag one = nfa_.Alt({nfa_.Literal(" "), nfa_.Literal("\n"), nfa_.Literal("\t")});
      ws = nfa_.Optional(nfa_.Seq({one, ws}));
    }
    return ws;
  }
  Frag Sep() { return nfa_.Seq({Ws(), nfa_.Literal(","), Ws()}); }
  Frag Container(char open, Frag body, char close) {
    return nfa_.Seq({nfa_.Literal(std::string(1, open)), Ws(), body, Ws(),
                     nfa_.Literal(std::string(1, close))});
  }

  // One character of a JSON string's content: unescaped, or an escape sequence.
  Frag StringChar() {
    Frag plain = nfa_.CodepointSet({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
    std::vector<Frag> u = {nfa_.Literal("u")};
    for (int i = 0; i < 4; ++i) {
      u.push_back(nfa_.Alt({nfa_.Bytes('0', '9'), nfa_.Bytes('a', 'f'), nfa_.Bytes('A', 'F')}));
    }
    Frag escape = nfa_.Seq({nfa_.Literal("\\"),
                            nfa_.Alt({nfa_.Literal("\""), nfa_.Literal("\\"), nfa_.Literal("/"),
                                      nfa_.Literal("b"), nfa_.Literal("f"), nfa_.Literal("n"),
                                      nfa_.Literal("r"), nfa_.Literal("t"), nfa_.Seq(u)})});
    return nfa_.Alt({plain, escape});
  }

  Frag String() {
    return nfa_.Seq({nfa_.Literal("\""), nfa_.Star(StringChar()), nfa_.Literal("\"")});
  }

  Frag Digits(int min, int max) {
    std::vector<Frag> parts;
    for (int i = 0; i < min; ++i) parts.push_back(nfa_.Bytes('0', '9'));
    Frag tail = nfa_.Empty();
    for (int i = min; i < max; ++i) tail = nfa_.Optional(nfa_.Seq({nfa_.Bytes('0', '9'), tail}));
    parts.push_back(tail);
    return nfa_.Seq(parts);
  }

  // Integers up to 16 digits; numbers add up to 16 fraction digits and a 2-digit exponent (a
  // double holds it: parsers read it as a finite number).
  Frag Number(bool integer, bool non_negative = false) {
    Frag whole = nfa_.Alt({nfa_.Literal("0"), nfa_.Seq({nfa_.Bytes('1', '9'), Digits(0, 15)})});
    std::vector<Frag> parts;
    if (!non_negative) parts.push_back(nfa_.Optional(nfa_.Literal("-")));
    parts.push_back(whole);
    if (!integer) {
      parts.push_back(nfa_.Optional(nfa_.Seq({nfa_.Literal("."), Digits(1, 16)})));
      parts.push_back(nfa_.Optional(nfa_.Seq({nfa_.Alt({nfa_.Literal("e"), nfa_.Literal("E")}),
                                              nfa_.Optional(nfa_.Alt({nfa_.Literal("+"),
                                                                      nfa_.Literal("-")})),
                                              Digits(1, 2)})));
    }
    return nfa_.Seq(parts);
  }

  Frag AnyArray(int depth) {
    return Container('[', nfa_.Optional(nfa_.SepList(AnyValue(depth - 1), Sep())), ']');
  }

  absl::StatusOr<Frag> Ref(const Json& ref, int depth) {
    if (!ref.is_string()) return Bad("$ref must be a string");
    const std::string& r = ref.get_ref<const std::string&>();
    if (r == "#") return Value(root_, depth + 1);
    for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
      if (r.rfind(prefix, 0) != 0) continue;
      const std::string name = r.substr(prefix.size());
      auto defs = root_.is_object() ? root_.find(std::string(prefix.substr(2, prefix.size() - 3)))
                                    : root_.end();
      if (name.find('/') == std::string::npos && defs != root_.end() && defs->is_object()) {
        if (auto it = defs->find(name); it != defs->end()) return Value(*it, depth + 1);
      }
      break;
    }
    return Bad(absl::StrCat("$ref \"", r.substr(0, 128),
                            "\" is not supported (only \"#\" and \"#/$defs/<name>\" or "
                            "\"#/definitions/<name>\" that exist)"));
  }

  absl::StatusOr<Frag> Enum(const Json& values) {
    if (!values.is_array() || values.empty()) return Bad("enum must be a non-empty array");
    std::vector<Frag> options;
    for (const Json& v : values) options.push_back(nfa_.Literal(v.dump()));
    return nfa_.Alt(options);
  }

  absl::StatusOr<Frag> AnyOf(const Json& schemas, const char* key, int depth) {
    if (!schemas.is_array() || schemas.empty()) {
      return Bad(absl::StrCat(key, " must be a non-empty array of schemas"));
    }
    std::vector<Frag> options;
    for (const Json& s : schemas) {
      auto f = Value(s, depth + 1);
      if (!f.ok()) return f.status();
      options.push_back(*f);
    }
    return nfa_.Alt(options);
  }

  absl::StatusOr<Frag> Typed(const Json& s, int depth) {
    auto type = s.find("type");
    std::vector<std::string> types;
    if (type == s.end()) {
      if (s.contains("properties") || s.contains("additionalProperties")) {
        types = {"object"};
      } else if (s.contains("items")) {
        types = {"array"};
      } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
                 s.contains("maxLength")) {
        types = {"string"};
      } else {
        return AnyValue(limits_.json_object_depth);
      }
    } else if (type->is_string()) {
      types = {type->get<std::string>()};
    } else if (type->is_array() && !type->empty()) {
      for (const Json& t : *type) {
        if (!t.is_string()) return Bad("type must be a string or an array of strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      return Bad("type must be a string or an array of strings");
    }
    std::vector<Frag> options;
    for (const std::string& t : types) {
      auto f = OfType(s, t, depth);
      if (!f.ok()) return f.status();
      options.push_back(*f);
    }
    return options.size() == 1 ? options[0] : nfa_.Alt(options);
  }

  absl::StatusOr<Frag> OfType(const Json& s, const std::string& t, int depth) {
    if (t == "string") return StringOf(s);
    if (t == "number") return Number(false);
    if (t == "integer") return Number(true);
    if (t == "boolean") return nfa_.Alt({nfa_.Literal("true"), nfa_.Literal("false")});
    if (t == "null") return nfa_.Literal("null");
    if (t == "array") return ArrayOf(s, depth);
    if (t == "object") return ObjectOf(s, depth);
    return Bad(absl::StrCat("unknown type \"", t.substr(0, 32), "\""));
  }

  absl::StatusOr<int> Bound(const Json& s, const char* key, int fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > uint64_t(limits_.max_repeat)) {
      return Bad(absl::StrCat(key, " must be an integer in [0, ", limits_.max_repeat, "]"));
    }
    return static_cast<int>(it->get<uint64_t>());
  }

  // min copies of `item`, then up to max - min more (max < 0: any number more), separated.
  template <typename MakeItem>
  absl::StatusOr<Frag> Repeated(int min, int max, MakeItem make_item, bool separated) {
    if (max >= 0 && max < min) return Bad("a maximum below its minimum");
    auto sep = [&] { return separated ? Sep() : nfa_.Empty(); };
    std::vector<Frag> parts;
    for (int i = 0; i < min; ++i) {
      if (i > 0) parts.push_back(sep());
      auto f = make_item();
      if (!f.ok()) return f.status();
      parts.push_back(*f);
      if (nfa_.overflowed()) return TooLarge();
    }
    if (max < 0) {
      auto f = make_item();
      if (!f.ok()) return f.status();
      if (min == 0) {
        parts.push_back(nfa_.Optional(separated ? nfa_.SepList(*f, Sep()) : nfa_.Plus(*f)));
      } else {
        parts.push_back(nfa_.Star(nfa_.Seq({sep(), *f})));
      }
      return nfa_.Seq(parts);
    }
    Frag tail = nfa_.Empty();
    for (int i = max - 1; i >= min; --i) {
      auto f = make_item();
      if (!f.ok()) return f.status();
      tail = nfa_.Optional(nfa_.Seq({i > 0 ? sep() : nfa_.Empty(), *f, tail}));
      if (nfa_.overflowed()) return TooLarge();
    }
    parts.push_back(tail);
    return nfa_.Seq(parts);
  }

  absl::StatusOr<Frag> StringOf(const Json& s) {
    auto min = Bound(s, "minLength", 0);
    if (!min.ok()) return min.status();
    auto max = Bound(s, "maxLength", -1);
    if (!max.ok()) return max.status();
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::string pattern;
    if (auto it = s.find("format"); it != s.end()) {
      const std::string f = it->is_string() ? it->get<std::string>() : "";
      if (f == "date") {
        pattern = kDate;
      } else if (f == "time") {
        pattern = kTime;
      } else if (f == "date-time") {
        pattern = absl::StrCat(std::string(kDate), "T", std::string(kTime));
      } else if (f == "uuid") {
        pattern = kUuid;
      } else if (f == "ipv4") {
        pattern = absl::StrCat("(", std::string(kIpv4Octet), "\\.){3}", std::string(kIpv4Octet));
      } else {
        return Bad(absl::StrCat("format \"", f.substr(0, 32),
                                "\" is not supported (date, time, date-time, uuid, ipv4 are)"));
      }
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) return Bad("pattern must be a string");
      if (!pattern.empty()) return Bad("pattern together with format is not supported");
      pattern = it->get<std::string>();
    }
    if (!pattern.empty()) {
      if (lengths) return Bad("pattern or format together with min/maxLength is not supported");
      RegexOptions options;
      options.json_string = true;
      auto node = ParseRegex(pattern, limits_, options);
      if (!node.ok()) return Bad(absl::StrCat("pattern: ", node.status().message()));
      return nfa_.Seq({nfa_.Literal("\""), CompileRegex(*node, &nfa_), nfa_.Literal("\"")});
    }
    if (!lengths) return String();
    auto body = Repeated(*min, *max, [&]() -> absl::StatusOr<Frag> { return StringChar(); },
                         /*separated=*/false);
    if (!body.ok()) return body.status();
    return nfa_.Seq({nfa_.Literal("\""), *body, nfa_.Literal("\"")});
  }

  absl::StatusOr<Frag> ArrayOf(const Json& s, int depth) {
    auto min = Bound(s, "minItems", 0);
    if (!min.ok()) return min.status();
    auto max = Bound(s, "maxItems", -1);
    if (!max.ok()) return max.status();
    auto items_it = s.find("items");
    const Json items = items_it == s.end() ? Json(true) : *items_it;
    if (items.is_array()) return Bad("items as an array (tuple validation) is not supported");
    auto body = Repeated(*min, *max, [&] { return Value(items, depth + 1); }, true);
    if (!body.ok()) return body.status();
    return Container('[', *body, ']');
  }

  absl::StatusOr<Frag> ObjectOf(const Json& s, int depth) {
    auto props_it = s.find("properties");
    auto additional = s.find("additionalProperties");
    const bool closed = additional != s.end() && additional->is_boolean() && !additional->get<bool>();
    if (props_it == s.end() || (props_it->is_object() && props_it->empty())) {
      if (closed) return nfa_.Seq({nfa_.Literal("{"), Ws(), nfa_.Literal("}")});
      if (additional == s.end() || additional->is_boolean()) {
        return AnyObject(limits_.json_object_depth);
      }
      auto value = Value(*additional, depth + 1);
      if (!value.ok()) return value.status();
      Frag kv = nfa_.Seq({String(), Ws(), nfa_.Literal(":"), Ws(), *value});
      return Container('{', nfa_.Optional(nfa_.SepList(kv, Sep())), '}');
    }
    if (!props_it->is_object()) return Bad("properties must be an object");
    std::vector<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Bad("required must be an array of strings");
      for (const Json& r : *it) {
        if (!r.is_string()) return Bad("required must be an array of strings");
        if (!props_it->contains(r.get<std::string>())) {
          return Bad(absl::StrCat("required property \"", r.get<std::string>().substr(0, 64),
                                  "\" is not in properties"));
        }
        required.push_back(r.get<std::string>());
      }
    }
    return Properties(*props_it, required, depth);
  }

  // Properties in declared order. `empty` is the state before any was written, `some` after
  // one was; an optional property may be skipped from either, and only `some` needs a comma.
  absl::StatusOr<Frag> Properties(const Json& props, const std::vector<std::string>& required,
                                  int depth) {
    Frag open = nfa_.Seq({nfa_.Literal("{"), Ws()});
    int32_t empty = open.out;
    int32_t some = nfa_.NewState();
    for (const auto& [name, schema] : props.items()) {
      auto value = Value(schema, depth + 1);
      if (!value.ok()) return value.status();
      Frag kv = nfa_.Seq({nfa_.Literal(Json(name).dump()), Ws(), nfa_.Literal(":"), Ws(), *value});
      Frag comma = Sep();
      const int32_t next_empty = nfa_.NewState(), next_some = nfa_.NewState();
      nfa_.Eps(empty, kv.in);
      nfa_.Eps(some, comma.in);
      nfa_.Eps(comma.out, kv.in);
      nfa_.Eps(kv.out, next_some);
      if (std::find(required.begin(), required.end(), name) == required.end()) {
        nfa_.Eps(empty, next_empty);
        nfa_.Eps(some, next_some);
      }
      empty = next_empty;
      some = next_some;
      if (nfa_.overflowed()) return TooLarge();
    }
    Frag close = nfa_.Seq({Ws(), nfa_.Literal("}")});
    nfa_.Eps(empty, close.in);
    nfa_.Eps(some, close.in);
    return Frag{open.in, close.out};
  }

  const Json& root_;
  const Limits& limits_;
  NfaBuilder& nfa_;
};

}  // namespace

absl::StatusOr<Frag> CompileJsonSchema(std::string_view schema_text, const Limits& limits,
                                       NfaBuilder* nfa) {
  if (schema_text.size() > limits.max_spec_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: longer than ", limits.max_spec_bytes, " bytes"));
  }
  if (absl::Status depth = CheckJsonDepth(schema_text); !depth.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", depth.message()));
  }
  const Json root = Json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("json_schema: not valid JSON");
  SchemaCompiler compiler(root, limits, nfa);
  auto frag = compiler.Value(root, 0);
  if (frag.ok() && nfa->overflowed()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "json_schema: the schema is too large (its automaton exceeds ", limits.max_nfa_states,
        " states)"));
  }
  return frag;
}

Frag CompileJsonObject(const Limits& limits, NfaBuilder* nfa) {
  static const Json kEmpty = Json::object();
  SchemaCompiler compiler(kEmpty, limits, nfa);
  return compiler.AnyObject(limits.json_object_depth);
}

}  // namespace strata::grammar
