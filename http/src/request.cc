// Request helpers and the OpenAI-style error body.
#include <string>

#include "nlohmann/json.hpp"
#include "strata/http/server.h"

namespace strata::http {

std::string Request::Header(std::string_view name) const {
  auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

std::string ErrorJson(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code) {
  auto string_or_null = [](std::string_view s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(s));
  };
  nlohmann::json error = {{"message", std::string(message)},
                          {"type", std::string(type)},
                          {"param", string_or_null(param)},
                          {"code", string_or_null(code)}};
  // Replace invalid UTF-8 (e.g. a path echoed back in the message) instead of throwing.
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

void RespondError(ResponseWriter& writer, int status, std::string_view message,
                  std::string_view type, std::string_view param, std::string_view code) {
  writer.Respond(status, "application/json", ErrorJson(message, type, param, code));
}

}  // namespace strata::http
