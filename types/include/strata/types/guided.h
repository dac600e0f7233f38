#pragma once
// A request's output constraint (structured output), as the OpenAI front end parsed it from
// response_format or the guided_* extensions. It travels as source text to every worker of the
// request, which compiles it against its own tokenizer's vocabulary (strata/grammar/grammar.h).
#include <string>

namespace strata {

struct GuidedDecoding {
  enum class Kind {
    kNone,
    kJsonObject,  // any JSON object (spec empty)
    kJsonSchema,  // spec: the JSON schema's text
    kRegex,       // spec: the pattern; the whole output matches it
    kChoice,      // spec: a JSON array of strings; the output is one of them
    kGrammar,     // spec: an EBNF grammar (root rule `root`)
    // spec: {"format": "llama3_json" | "hermes" | "mistral", "call": <JSON schema of one call
    // object>, "max_calls": 1..4}: the output is 1..max_calls calls in that model family's
    // tool-call syntax (tool_choice "required" or a named function).
    kToolCalls,
  };
  Kind kind = Kind::kNone;
  std::string spec;

  bool active() const { return kind != Kind::kNone; }
  // Bounds the spec text before anything parses it.
  static constexpr size_t kMaxSpecBytes = 64 * 1024;
};

// "json_object", "json_schema", "regex", "choice", "grammar"; kNone: "".
const char* GuidedKindName(GuidedDecoding::Kind kind);

}  // namespace strata
