// Fuzzes the tool-call output parsers. The first byte picks the format (llama3_json, hermes,
// mistral) and the size of the pieces the rest is streamed in; the rest is model output. The
// parsers must not crash, hang or hold unbounded text, and must keep their contract: streamed
// in pieces they give what the whole output gives, and an output without calls comes back as
// its content unchanged. A broken contract aborts (a finding, like a crash).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "strata/openai/tool_calls.h"

namespace {

using strata::openai::ToolCallOutput;
using strata::openai::ToolCallParser;
using strata::openai::ToolCallStreamParser;

void Append(ToolCallOutput* all, ToolCallOutput part) {
  all->content += part.content;
  for (auto& call : part.calls) all->calls.push_back(std::move(call));
}

bool Same(const ToolCallOutput& a, const ToolCallOutput& b) {
  if (a.content != b.content || a.calls.size() != b.calls.size()) return false;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr ToolCallParser kParsers[] = {ToolCallParser::kLlama3Json,
                                                ToolCallParser::kHermes, ToolCallParser::kMistral};
  const ToolCallParser parser = kParsers[data[0] % 3];
  const size_t piece = 1 + data[0] / 3;  // 1..86 bytes per Feed
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  const ToolCallOutput whole = strata::openai::ParseToolCalls(parser, text);
  if (whole.calls.empty() && whole.content != text) std::abort();

  ToolCallStreamParser stream(parser);
  ToolCallOutput streamed;
  for (size_t at = 0; at < text.size(); at += piece) {
    Append(&streamed, stream.Feed(text.substr(at, piece)));
  }
  Append(&streamed, stream.Finish());
  if (!Same(whole, streamed)) std::abort();
  return 0;
}
