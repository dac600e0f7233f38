// Fuzzes the chat-template interpreter: the input is compiled as a template and rendered with
// a small fixed conversation, with and without the generation prompt. Templates over 4 KiB are
// skipped so one input cannot take seconds; what a template may loop over is bounded by the
// interpreter itself.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "strata/text/chat_template.h"

namespace {

constexpr size_t kMaxTemplateBytes = 4096;

const nlohmann::ordered_json& Messages() {
  static const nlohmann::ordered_json* messages = new nlohmann::ordered_json(
      nlohmann::ordered_json::parse(R"([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi \u00e9\u4e16"},
        {"role": "assistant", "content": "Hello.",
         "tool_calls": [{"type": "function",
                         "function": {"name": "f", "arguments": {"x": [1, 2.5, null]}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "user", "content": ""}
      ])"));
  return *messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxTemplateBytes) return 0;
  auto tmpl = strata::ChatTemplate::FromString(std::string(reinterpret_cast<const char*>(data),
                                                           size),
                                               "<s>", "</s>");
  if (!tmpl.ok()) return 0;
  const nlohmann::ordered_json extra = {{"tools", nlohmann::ordered_json::array()},
                                        {"enable_thinking", false}};
  (void)tmpl->Render(Messages(), /*add_generation_prompt=*/true, extra);
  (void)tmpl->Render(Messages(), /*add_generation_prompt=*/false);
  return 0;
}
