#include "wire.h"

#include <boost/beast/http/status.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::http::internal {
namespace {

namespace bhttp = boost::beast::http;

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsSafe(std::string_view s) { return s.find_first_of(std::string_view("\r\n\0", 3)) == s.npos; }

// Headers the formatter owns: a handler's copy would contradict the framing.
bool IsFramingHeader(std::string_view view) {
  const absl::string_view name = Absl(view);
  return absl::EqualsIgnoreCase(name, "content-length") ||
         absl::EqualsIgnoreCase(name, "transfer-encoding") ||
         absl::EqualsIgnoreCase(name, "connection") || absl::EqualsIgnoreCase(name, "content-type");
}

bool HasHeader(const std::map<std::string, std::string>& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, Absl(name))) return true;
  }
  return false;
}

}  // namespace

std::string FormatHead(const ResponseHead& head) {
  const int status = head.status >= 100 && head.status <= 599 ? head.status : 500;
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ",
                                 absl::string_view(reason.data(), reason.size()), "\r\n");
  if (!head.content_type.empty() && IsSafe(head.content_type)) {
    absl::StrAppend(&out, "Content-Type: ", head.content_type, "\r\n");
  }
  switch (head.framing) {
    case BodyFraming::kContentLength:
      absl::StrAppend(&out, "Content-Length: ", head.content_length, "\r\n");
      break;
    case BodyFraming::kChunked:
      absl::StrAppend(&out, "Transfer-Encoding: chunked\r\n");
      break;
    case BodyFraming::kUntilClose:
      break;
  }
  const bool streaming = head.framing != BodyFraming::kContentLength;
  if (streaming && !HasHeader(head.headers, "cache-control")) {
    absl::StrAppend(&out, "Cache-Control: no-cache\r\n");
  }
  absl::StrAppend(&out, "Connection: ", head.keep_alive ? "keep-alive" : "close", "\r\n");
  for (const auto& [name, value] : head.headers) {
    if (name.empty() || !IsSafe(name) || !IsSafe(value) || IsFramingHeader(name)) continue;
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  out += "\r\n";
  return out;
}

std::string FormatChunk(std::string_view data) {
  return absl::StrCat(absl::Hex(data.size()), "\r\n", Absl(data), "\r\n");
}

}  // namespace strata::http::internal
