#pragma once
// Bounds on JSON text from outside the process, checked before it is parsed: nlohmann::json
// parses iteratively, but copying, converting and destroying a parsed value recurse once per
// level of nesting, so a small body of deeply nested arrays would overflow the stack.
#include <string_view>

#include "absl/status/status.h"

namespace strata {

// Deepest nesting of arrays and objects accepted in outside JSON (an OpenAI request, a trace
// line): far beyond what a request or a JSON schema needs, far below what recursion can take.
inline constexpr int kMaxJsonDepth = 128;

// InvalidArgument ("JSON nested deeper than N levels") when arrays / objects in `text` nest
// deeper than `max_depth`; OK otherwise, also for text that is not valid JSON (the parser
// reports that). One linear pass with no recursion and no allocation; brackets inside strings
// do not count.
absl::Status CheckJsonDepth(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace strata
