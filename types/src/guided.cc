#include "strata/types/guided.h"

namespace strata {

const char* GuidedKindName(GuidedDecoding::Kind kind) {
  switch (kind) {
    case GuidedDecoding::Kind::kNone:
      return "";
    case GuidedDecoding::Kind::kJsonObject:
      return "json_object";
    case GuidedDecoding::Kind::kJsonSchema:
      return "json_schema";
    case GuidedDecoding::Kind::kRegex:
      return "regex";
    case GuidedDecoding::Kind::kChoice:
      return "choice";
    case GuidedDecoding::Kind::kGrammar:
      return "grammar";
    case GuidedDecoding::Kind::kToolCalls:
      return "tool_calls";
  }
  return "";
}

}  // namespace strata
