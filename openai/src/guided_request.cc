#include "src/guided_request.h"

#include "absl/strings/str_cat.h"
#include "strata/grammar/grammar.h"

namespace strata::openai::internal {
namespace {

using Ordered = nlohmann::ordered_json;

// OpenAI's, vLLM's (guided_*, structured_outputs) and SGLang's (regex, json_schema) names.
constexpr const char* kFields[] = {"response_format", "guided_json", "guided_regex",
                                   "guided_choice", "guided_grammar", "structured_outputs",
                                   "regex", "json_schema", "ebnf"};

ApiError Bad(std::string message, std::string param) {
  return ApiError::BadRequest(std::move(message), std::move(param));
}

// A schema given as an object, or as a string holding one (vLLM accepts both for guided_json).
std::optional<ApiError> SchemaText(const Ordered& v, const std::string& param, std::string* out) {
  if (v.is_string()) {
    const Ordered parsed = Ordered::parse(v.get_ref<const std::string&>(), nullptr, false);
    if (parsed.is_discarded()) return Bad(absl::StrCat(param, " is not valid JSON"), param);
    *out = parsed.dump();
  } else if (v.is_object() || v.is_boolean()) {
    *out = v.dump();
  } else {
    return Bad(absl::StrCat(param, " must be a JSON schema (an object)"), param);
  }
  return std::nullopt;
}

std::optional<ApiError> ResponseFormat(const Ordered& v, GuidedDecoding* g) {
  if (!v.is_object()) return Bad("response_format must be an object with a type", "response_format");
  auto type = v.find("type");
  if (type == v.end() || !type->is_string()) {
    return Bad("response_format.type must be \"text\", \"json_object\" or \"json_schema\"",
               "response_format.type");
  }
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    g->kind = GuidedDecoding::Kind::kJsonObject;
    return std::nullopt;
  }
  if (t != "json_schema") {
    return Bad(absl::StrCat("response_format.type \"", t.substr(0, 32),
                            "\" is not supported (\"text\", \"json_object\", \"json_schema\" are)"),
               "response_format.type");
  }
  auto js = v.find("json_schema");
  if (js == v.end() || !js->is_object()) {
    return Bad("response_format.json_schema must be an object with name and schema",
               "response_format.json_schema");
  }
  if (auto name = js->find("name"); name != js->end() && !name->is_string()) {
    return Bad("response_format.json_schema.name must be a string",
               "response_format.json_schema.name");
  }
  if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() &&
                                        !strict->is_boolean()) {
    return Bad("response_format.json_schema.strict must be a boolean",
               "response_format.json_schema.strict");
  }
  auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    return Bad("response_format.json_schema.schema is required",
               "response_format.json_schema.schema");
  }
  g->kind = GuidedDecoding::Kind::kJsonSchema;
  return SchemaText(*schema, "response_format.json_schema.schema", &g->spec);
}

std::optional<ApiError> StringField(const Ordered& v, const std::string& param,
                                    GuidedDecoding::Kind kind, GuidedDecoding* g) {
  if (!v.is_string()) return Bad(absl::StrCat(param, " must be a string"), param);
  g->kind = kind;
  g->spec = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ChoiceField(const Ordered& v, const std::string& param,
                                    GuidedDecoding* g) {
  if (!v.is_array()) return Bad(absl::StrCat(param, " must be an array of strings"), param);
  g->kind = GuidedDecoding::Kind::kChoice;
  g->spec = v.dump();
  return std::nullopt;
}

// vLLM's structured_outputs object: one of json, regex, choice.
std::optional<ApiError> StructuredOutputs(const Ordered& v, GuidedDecoding* g) {
  const std::string param = "structured_outputs";
  if (!v.is_object()) return Bad("structured_outputs must be an object", param);
  int set = 0;
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    const std::string sub = absl::StrCat(param, ".", key.substr(0, 32));
    std::optional<ApiError> e;
    if (key == "json") {
      g->kind = GuidedDecoding::Kind::kJsonSchema;
      e = SchemaText(value, sub, &g->spec);
    } else if (key == "json_object") {
      if (!value.is_boolean()) return Bad(absl::StrCat(sub, " must be a boolean"), sub);
      if (!value.get<bool>()) continue;
      g->kind = GuidedDecoding::Kind::kJsonObject;
    } else if (key == "regex") {
      e = StringField(value, sub, GuidedDecoding::Kind::kRegex, g);
    } else if (key == "choice") {
      e = ChoiceField(value, sub, g);
    } else if (key == "grammar") {
      e = StringField(value, sub, GuidedDecoding::Kind::kGrammar, g);
    } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties" || key == "whitespace_pattern") {
      continue;  // backend tuning strata has no use for
    } else {
      return Bad(absl::StrCat(sub, " is not supported (json, json_object, regex, choice, grammar are)"),
                 sub);
    }
    if (e) return e;
    ++set;
  }
  if (set > 1) return Bad("structured_outputs may set only one of json, json_object, regex, choice, grammar", param);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseGuidedFields(std::string_view body, const nlohmann::json& json,
                                          SamplingParams* p) {
  const char* given = nullptr;
  for (const char* f : kFields) {
    auto it = json.find(f);
    if (it == json.end() || it->is_null()) continue;
    if (given != nullptr) {
      return Bad(absl::StrCat(given, " and ", f, " cannot both be given: send one constraint"),
                 f);
    }
    given = f;
  }
  if (given == nullptr) return std::nullopt;
  const Ordered ordered = Ordered::parse(body, nullptr, /*allow_exceptions=*/false);
  auto found = ordered.is_object() ? ordered.find(given) : ordered.end();
  if (found == ordered.end()) return Bad("request body is not valid JSON", "");
  const Ordered& v = *found;
  const std::string param = given;
  GuidedDecoding g;
  std::optional<ApiError> e;
  if (param == "response_format") {
    e = ResponseFormat(v, &g);
  } else if (param == "guided_json" || param == "json_schema") {
    g.kind = GuidedDecoding::Kind::kJsonSchema;
    e = SchemaText(v, param, &g.spec);
  } else if (param == "guided_regex" || param == "regex") {
    e = StringField(v, param, GuidedDecoding::Kind::kRegex, &g);
  } else if (param == "guided_choice") {
    e = ChoiceField(v, param, &g);
  } else if (param == "guided_grammar" || param == "ebnf") {
    e = StringField(v, param, GuidedDecoding::Kind::kGrammar, &g);
  } else {
    e = StructuredOutputs(v, &g);
  }
  if (e) return e;
  if (!g.active()) return std::nullopt;
  if (g.spec.size() > GuidedDecoding::kMaxSpecBytes) {
    return Bad(absl::StrCat(param, ": the constraint is ", g.spec.size(),
                            " bytes; at most ", GuidedDecoding::kMaxSpecBytes, " are accepted"),
               param);
  }
  // Compiled here to refuse a bad constraint with a 400 before any worker sees it; each worker
  // compiles it again for its vocabulary (cached per spec).
  if (auto compiled = grammar::Grammar::Compile(g); !compiled.ok()) {
    return Bad(std::string(compiled.status().message()), param);
  }
  p->guided = std::move(g);
  return std::nullopt;
}

}  // namespace strata::openai::internal
