#pragma once
// Bytes on the wire for responses: status line + header block, and chunked framing. Parsing
// is Beast's; writing is this small formatter so every response part is a plain string that the
// connection can queue and gather-write in order.
#include <map>
#include <string>
#include <string_view>

namespace strata::http::internal {

enum class BodyFraming {
  kContentLength,  // `content_length` bytes follow
  kChunked,        // Transfer-Encoding: chunked
  kUntilClose,     // HTTP/1.0 stream: the body ends when the connection closes
};

struct ResponseHead {
  int status = 200;
  std::string content_type;
  std::map<std::string, std::string> headers;  // from the handler; framing headers are ignored
  BodyFraming framing = BodyFraming::kContentLength;
  size_t content_length = 0;
  bool keep_alive = true;
};

// "HTTP/1.1 <status> <reason>\r\n" + headers + "\r\n". Header names or values holding CR, LF or
// NUL are dropped (response splitting); a status outside 100..599 becomes 500.
std::string FormatHead(const ResponseHead& head);

// One chunk of a chunked body; `data` must not be empty (that is the last chunk).
std::string FormatChunk(std::string_view data);
// The last chunk (no trailers).
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace strata::http::internal
