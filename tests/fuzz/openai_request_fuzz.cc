// Fuzzes the OpenAI request parsers: the same body goes to /v1/completions' and
// /v1/chat/completions' parser. Either returns an ApiError or fills the request; neither may
// crash, hang or leak, whatever the bytes (deep nesting, invalid UTF-8, huge numbers...).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "strata/openai/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  strata::openai::CompletionRequest completion;
  (void)strata::openai::ParseCompletionRequest(body, &completion);
  strata::openai::ChatRequest chat;
  if (!strata::openai::ParseChatRequest(body, &chat)) {
    // A parsed request is copied and dumped on its way to the template and the logs.
    (void)chat.messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    (void)chat.chat_template_kwargs.dump(-1, ' ', false,
                                         nlohmann::ordered_json::error_handler_t::replace);
    (void)chat.tools.tools.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  return 0;
}
