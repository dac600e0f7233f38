#include "stream_session.h"

#include <boost/asio/connect.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace strata::replay::internal {
namespace beast = boost::beast;
namespace http = boost::beast::http;
using Json = nlohmann::json;

namespace {
bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}
}  // namespace

// ---- SseRecorder --------------------------------------------------------------------------

bool SseRecorder::Feed(std::string_view bytes, double now_s) {
  if (done_ || r_->error != ErrorKind::kNone) return false;
  for (char c : bytes) {
    if (c != '\r') pending_.push_back(c);  // SSE allows CRLF; normalize to LF.
  }
  size_t start = 0;
  for (size_t end; (end = pending_.find("\n\n", start)) != std::string::npos; start = end + 2) {
    OnEvent(std::string_view(pending_).substr(start, end - start), now_s);
    if (done_ || r_->error != ErrorKind::kNone) return false;
  }
  pending_.erase(0, start);
  return true;
}

void SseRecorder::OnEvent(std::string_view event, double now_s) {
  std::string data;
  while (!event.empty()) {
    size_t nl = event.find('\n');
    std::string_view line = event.substr(0, nl);
    event = nl == std::string_view::npos ? std::string_view() : event.substr(nl + 1);
    if (ConsumePrefix(&line, "id:")) {
      ConsumePrefix(&line, " ");
      last_event_id_ = std::string(line.substr(0, 256));
      continue;
    }
    if (!ConsumePrefix(&line, "data:")) continue;  // comments, event: ...
    ConsumePrefix(&line, " ");
    if (!data.empty()) data.push_back('\n');
    data.append(line);
  }
  if (data.empty()) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  OnChunk(data, now_s);
}

void SseRecorder::OnChunk(const std::string& text, double now_s) {
  Json chunk = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) return Fail(ErrorKind::kStream, "bad_event", "malformed SSE JSON");
  if (auto e = chunk.find("error"); e != chunk.end()) {
    std::string type = "stream_error", message;
    if (e->is_object()) {
      if (e->contains("type") && (*e)["type"].is_string()) type = (*e)["type"];
      if (e->contains("message") && (*e)["message"].is_string()) message = (*e)["message"];
    }
    return Fail(ErrorKind::kStream, type, message);
  }
  auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) {
    const double since_send = now_s - r_->send_s;
    if (r_->ttft_s < 0) {
      r_->ttft_s = since_send;
    } else {
      r_->gaps_s.push_back(now_s - last_chunk_s_);
    }
    last_chunk_s_ = now_s;
    ++r_->token_chunks;
  }
  auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    r_->prompt_tokens = usage->value("prompt_tokens", -1);
    r_->completion_tokens = usage->value("completion_tokens", -1);
    auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) {
      r_->cached_tokens = details->value("cached_tokens", -1);
    }
  }
}

void SseRecorder::Fail(ErrorKind kind, std::string type, std::string message) {
  r_->error = kind;
  r_->error_type = std::move(type);
  r_->error_message = std::move(message);
}

// ---- ClientStream -------------------------------------------------------------------------

absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeClientTlsContext(
    const std::string& ca_file) {
  namespace ssl = boost::asio::ssl;
  auto context = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  static const unsigned char kAlpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  SSL_CTX_set_alpn_protos(context->native_handle(), kAlpn, sizeof(kAlpn));
  beast::error_code ec;
  context->set_verify_mode(ssl::verify_peer, ec);
  if (ca_file.empty()) {
    context->set_default_verify_paths(ec);
  } else {
    context->load_verify_file(ca_file, ec);
  }
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ca ", ca_file.empty() ? "(the system's CAs)" : ca_file, ": ", ec.message()));
  }
  return context;
}

void ClientStream::NewTlsStream() {
  if (tls_stream_ != nullptr) Close();
  tls_stream_ = std::make_unique<TlsStream>(executor_, *tls_);
  SSL* ssl = tls_stream_->native_handle();
  beast::error_code ec;
  boost::asio::ip::make_address(host_, ec);
  if (ec) {
    // A DNS name: sent as SNI and checked against the certificate's DNS names.
    SSL_set_tlsext_host_name(ssl, host_.c_str());
    SSL_set1_host(ssl, host_.c_str());
  } else {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host_.c_str());
  }
}

void ClientStream::Close() {
  beast::error_code ignored;
  tcp().socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  tcp().socket().close(ignored);
}

std::string ClientStream::Describe(const beast::error_code& ec) const {
  std::string text = ec.message();
  if (tls_stream_ != nullptr) {
    const long verify = SSL_get_verify_result(const_cast<TlsStream&>(*tls_stream_).native_handle());
    if (verify != X509_V_OK) {
      absl::StrAppend(&text, " (server certificate: ", X509_verify_cert_error_string(verify), ")");
    }
  }
  return text;
}

// ---- StreamSession ------------------------------------------------------------------------

StreamSession::StreamSession(boost::asio::any_io_executor strand, const Target* target,
                             std::string body, RequestResult* result, Clock::time_point origin,
                             std::function<void()> on_done)
    : stream_(strand, target->tls.get(), target->host),
      target_(target),
      backoff_(strand),
      r_(result),
      origin_(origin),
      recorder_(result, origin),
      on_done_(std::move(on_done)) {
  request_.method(http::verb::post);
  request_.target(target->path);
  request_.version(11);
  request_.set(http::field::host, target->host_header);
  request_.set(http::field::content_type, "application/json");
  request_.set(http::field::accept, "text/event-stream");
  if (!target->api_key.empty()) {
    request_.set(http::field::authorization, absl::StrCat("Bearer ", target->api_key));
  }
  request_.body() = std::move(body);
  request_.prepare_payload();
}

void StreamSession::SetIdempotencyKey(std::string key) {
  request_.set("Idempotency-Key", std::move(key));
}

void StreamSession::Start() {
  r_->send_s = SecondsSince(origin_);
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(target_->timeout_s));
  Connect();
}

void StreamSession::Connect() {
  parser_.emplace();
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  buffer_.consume(buffer_.size());
  stream_.Connect(target_->endpoints, deadline_,
                  [self = shared_from_this()](beast::error_code ec) { self->OnConnect(ec); });
}

void StreamSession::OnConnect(beast::error_code ec) {
  if (ec) return FinishNetworkError(ec, "connect");
  stream_.tcp().expires_at(deadline_);
  stream_.With([this](auto& stream) {
    http::async_write(stream, request_, [self = shared_from_this()](beast::error_code e, size_t) {
      self->OnWrite(e);
    });
  });
}

void StreamSession::OnWrite(beast::error_code ec) {
  if (ec) return FinishNetworkError(ec, "write");
  stream_.tcp().expires_at(deadline_);
  stream_.With([this](auto& stream) {
    http::async_read_header(
        stream, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code e, size_t) { self->OnHeader(e); });
  });
}

void StreamSession::OnHeader(beast::error_code ec) {
  if (ec) return FinishNetworkError(ec, "response header");
  r_->http_status = static_cast<int>(parser_->get().result_int());
  if (r_->http_status != 200) return ReadErrorBody();
  ReadBody();
}

void StreamSession::ReadBody() {
  if (parser_->is_done()) {
    return Finish(ErrorKind::kStream, "incomplete_stream", "stream ended without [DONE]");
  }
  parser_->get().body().data = chunk_;
  parser_->get().body().size = sizeof(chunk_);
  stream_.tcp().expires_at(deadline_);
  stream_.With([this](auto& stream) {
    http::async_read_some(
        stream, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code e, size_t) { self->OnBody(e); });
  });
}

void StreamSession::OnBody(beast::error_code ec) {
  if (ec == http::error::need_buffer) ec = {};
  const size_t n = sizeof(chunk_) - parser_->get().body().size;
  if (n > 0 && !recorder_.Feed(std::string_view(chunk_, n), SecondsSince(origin_))) {
    return Finish(r_->error, r_->error_type, r_->error_message);  // [DONE] or an error event.
  }
  if (ec) return FinishNetworkError(ec, "stream");
  ReadBody();
}

void StreamSession::ReadErrorBody() {
  auto on_read = [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = sizeof(self->chunk_) - self->parser_->get().body().size;
    self->error_body_.append(self->chunk_, n);
    if (!ec && !self->parser_->is_done() && self->error_body_.size() < (1 << 20)) {
      return self->ReadErrorBody();
    }
    const int status = self->r_->http_status;
    Json body = Json::parse(self->error_body_, nullptr, /*allow_exceptions=*/false);
    std::string type = absl::StrCat("http_", status), message = self->error_body_;
    if (body.is_object() && body.contains("error") && body["error"].is_object()) {
      const Json& e = body["error"];
      if (e.contains("type") && e["type"].is_string()) type = e["type"];
      if (e.contains("message") && e["message"].is_string()) message = e["message"];
    }
    self->Finish(status >= 500 ? ErrorKind::kHttp5xx : ErrorKind::kHttp4xx, type, message);
  };
  if (parser_->is_done()) return on_read({}, 0);
  parser_->get().body().data = chunk_;
  parser_->get().body().size = sizeof(chunk_);
  stream_.tcp().expires_at(deadline_);
  stream_.With(
      [&](auto& stream) { http::async_read_some(stream, buffer_, *parser_, std::move(on_read)); });
}

bool StreamSession::Retry(beast::error_code ec) {
  if (ec == beast::error::timeout || attempt_ >= target_->attempts) return false;
  ++attempt_;
  ++r_->retries;
  stream_.Close();
  recorder_.DropPartialEvent();
  r_->http_status = 0;
  if (!recorder_.last_event_id().empty()) {
    ++r_->resumes;
    request_.set("Last-Event-ID", recorder_.last_event_id());
  }
  const auto backoff =
      std::min(std::chrono::milliseconds(250 * (attempt_ - 1)), std::chrono::milliseconds(2000));
  backoff_.expires_after(backoff);
  backoff_.async_wait([self = shared_from_this()](beast::error_code) { self->Connect(); });
  return true;
}

void StreamSession::FinishNetworkError(beast::error_code ec, const char* during) {
  if (Retry(ec)) return;
  if (ec == beast::error::timeout) {
    return Finish(ErrorKind::kTimeout, "timeout", absl::StrCat("timed out during ", during));
  }
  const bool before_response = r_->http_status == 0 && std::string_view(during) != "stream";
  Finish(before_response && std::string_view(during) != "response header" ? ErrorKind::kConnect
                                                                          : ErrorKind::kStream,
         std::string(during) + "_error", absl::StrCat(during, ": ", stream_.Describe(ec)));
}

void StreamSession::Finish(ErrorKind kind, std::string type, std::string message) {
  if (finished_) return;
  finished_ = true;
  r_->e2e_s = SecondsSince(origin_) - r_->send_s;
  r_->error = kind;
  if (kind != ErrorKind::kNone) {
    r_->error_type = std::move(type);
    r_->error_message = std::move(message);
  }
  stream_.Close();
  on_done_();
}

}  // namespace strata::replay::internal
