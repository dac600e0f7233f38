#pragma once
// JSON schemas (and free-form JSON) compiled to NFA fragments that produce compact JSON the
// schema accepts. Supported: type (one or a list) object/array/string/number/integer/boolean/
// null; properties (emitted in their declared order), required, additionalProperties (false,
// true, or a schema when there are no properties); items, minItems, maxItems; minLength,
// maxLength, pattern, format (date, time, date-time, uuid, ipv4); enum, const; anyOf, oneOf
// (as anyOf), allOf of one schema; $ref to "#", "#/$defs/..." or "#/definitions/...", not
// recursive; boolean schemas; annotations (title, description, default, examples, ...) are
// ignored. Any other keyword is refused, the error naming it.
#include <string_view>

#include "absl/status/statusor.h"
#include "src/nfa.h"
#include "strata/grammar/grammar.h"

namespace strata::grammar {

// `schema_text`: the schema as JSON text. The fragment matches the whole output.
absl::StatusOr<Frag> CompileJsonSchema(std::string_view schema_text, const Limits& limits,
                                       NfaBuilder* nfa);
// Any JSON object, containers nested at most limits.json_object_depth deep.
Frag CompileJsonObject(const Limits& limits, NfaBuilder* nfa);

}  // namespace strata::grammar
