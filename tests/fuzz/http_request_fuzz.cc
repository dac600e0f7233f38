// Fuzzes HTTP/1.1 request parsing as a connection does it, without sockets: the bytes are one
// connection's input, parsed by Beast's request parser with the server's limits (64 KiB of
// head, ServerOptions::max_body_bytes of body; Content-Length and chunked bodies), fed in
// pieces whose size the first input byte picks, and pipelined requests are parsed one after
// another. Each complete request becomes an http::Request (header names lower-cased,
// repeated headers joined) as the server hands it to a handler.
#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "session.h"
#include "strata/http/server.h"

namespace {

namespace bhttp = boost::beast::http;

constexpr size_t kHeaderLimit = 64 << 10;
constexpr int kMaxRequestsPerInput = 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 64;  // bytes that arrive per read
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t total = size - 1;
  const size_t max_body = strata::http::ServerOptions{}.max_body_bytes;

  size_t begin = 0;  // first byte the parser has not consumed
  size_t end = std::min(total, step);  // bytes received so far
  for (int n = 0; n < kMaxRequestsPerInput && begin < total; ++n) {
    std::optional<bhttp::request_parser<bhttp::string_body>> parser(std::in_place);
    parser->header_limit(kHeaderLimit);
    parser->body_limit(max_body);
    parser->eager(true);
    boost::beast::error_code ec;
    while (!parser->is_done()) {
      const size_t used = parser->put(boost::asio::buffer(bytes + begin, end - begin), ec);
      begin += used;
      if (ec && ec != bhttp::error::need_more) return 0;  // 400 / 413 / 431: answer and close
      if (ec || used == 0) {  // the parser waits for more bytes
        ec = {};
        if (end == total) {
          parser->put_eof(ec);  // the client closed: complete only for a body read to EOF
          break;
        }
        end = std::min(total, end + step);
      }
    }
    if (ec || !parser->is_done()) return 0;
    const bool keep_alive = parser->get().keep_alive();
    const strata::http::Request request = strata::http::internal::ToRequest(parser->release(), "");
    (void)request.Header("content-type");
    (void)request.Header("expect");
    if (!keep_alive) return 0;
    if (begin == end) end = std::min(total, end + step);
  }
  return 0;
}
