#pragma once
// The structured-output fields of a request: OpenAI's `response_format`, vLLM's `guided_json` /
// `guided_regex` / `guided_choice` / `guided_grammar` and `structured_outputs`, SGLang's `regex`
// / `json_schema` / `ebnf`. Internal to
// strata::openai (used by the request parsers in protocol.cc).
#include <optional>
#include <string_view>

#include "nlohmann/json.hpp"
#include "strata/openai/protocol.h"

namespace strata::openai::internal {

// Reads the constraint, at most one per request, into p->guided and compiles it (refusing an
// unsupported keyword, a syntax error or a constraint over the size limits with a 400 whose
// param names the field; see docs/openai_api.md). `body` is the request's text, re-read with its
// key order only when a constraint is present: properties are generated in the schema's order.
std::optional<ApiError> ParseGuidedFields(std::string_view body, const nlohmann::json& json,
                                          SamplingParams* p);

}  // namespace strata::openai::internal
