#pragma once
// An asynchronous HTTP/1.1 server (Boost.Beast over Boost.Asio), optionally over TLS (OpenSSL),
// for the OpenAI front end, the health/readiness probes and /metrics of every strata process.
//
// A small pool of I/O threads serves thousands of keep-alive connections, each of which may
// hold a long streaming response (Server-Sent Events over chunked transfer encoding). Handlers
// run on an I/O thread and must not block: a handler that waits for work elsewhere keeps its
// ResponseWriter (a shared_ptr) and completes it later from any thread.
//
// Thread-safety: Route() before Start(); everything else is thread-safe.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata::http {

struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // path and query, as sent
  std::string path;                            // target without the query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;  // "ip:port" of the client

  // Header value or "" (name in lower case).
  std::string Header(std::string_view name) const;
};

// How a handler answers. Exactly one of Respond() or StartStream()..End() is used per request.
// All methods are thread-safe and never block on the network: data is queued and written by
// the connection's I/O thread.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // A complete response with Content-Length.
  virtual void Respond(int status, std::string content_type, std::string body,
                       std::map<std::string, std::string> headers = {}) = 0;

  // Starts a chunked response (e.g. text/event-stream). False if the client is already gone.
  virtual bool StartStream(int status, std::string content_type,
                           std::map<std::string, std::string> headers = {}) = 0;
  // Queues one chunk; false once the client has disconnected (the data is dropped).
  virtual bool Write(std::string data) = 0;
  // Ends the stream (last chunk); the connection then serves its next request.
  virtual void End() = 0;

  // True once the client has disconnected (or the server is stopping) before the response
  // completed.
  virtual bool IsClosed() const = 0;
  // Registers a callback run once, on an I/O thread, when the client disconnects before the
  // response completed; runs at once if it already has. Used to cancel the request's work.
  virtual void OnClose(std::function<void()> callback) = 0;
};

using Handler = std::function<void(const Request&, std::shared_ptr<ResponseWriter>)>;

// HTTPS. With cert_file and key_file set, every connection of the server speaks TLS (1.2 or
// later; ALPN http/1.1). The files are checked for change at most every `reload_interval`, when
// a connection arrives: new connections get the new certificate, open ones keep theirs. A
// replacement that does not load (say the certificate is written before its key) is ignored
// until it does. A connection that has not finished its handshake within `handshake_timeout`
// is closed; one that sends plaintext HTTP instead gets a 400 and is closed.
struct TlsOptions {
  std::string cert_file;  // PEM: the server's certificate, intermediates may follow
  std::string key_file;   // PEM: its private key
  // PEM CA certificate(s): when set, clients must present a certificate that chains to one of
  // them. A client that presents none still completes the handshake but gets 403 on every
  // path except `probe_paths` (a Kubernetes or supervisor probe has no certificate); one that
  // presents a certificate the CA did not sign fails the handshake.
  std::string client_ca_file;
  std::vector<std::string> probe_paths = {"/health", "/ready"};
  absl::Duration handshake_timeout = absl::Seconds(10);
  absl::Duration reload_interval = absl::Seconds(5);

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                     // 0: an ephemeral port (see Server::port())
  int threads = 2;                                  // I/O threads
  size_t max_body_bytes = 8 << 20;                  // larger bodies get 413 before the handler
  int max_connections = 16384;                      // beyond it new connections are closed
  // Open connections from one client address; beyond it that client's new connections are
  // closed (one client cannot take every connection).
  int max_connections_per_client = 4096;
  absl::Duration idle_timeout = absl::Seconds(60);  // keep-alive connection without a request
  // A client that reads too slowly is cut off (its response's OnClose callbacks run, which
  // cancel the request's work): when the bytes queued for one connection pass
  // max_queued_write_bytes, or one write to the socket makes no progress for write_timeout.
  size_t max_queued_write_bytes = 8 << 20;
  absl::Duration write_timeout = absl::Seconds(30);
  TlsOptions tls;  // off unless tls.enabled()
};

class Server {
 public:
  // InvalidArgument for bad options, including TLS files that do not load (one line naming the
  // file and the reason).
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  virtual ~Server() = default;

  // Exact-path routes. Unknown paths get 404 and a known path with another method 405, both as
  // OpenAI-style JSON errors. Call before Start().
  virtual void Route(std::string method, std::string path, Handler handler) = 0;

  // Binds and starts serving; error if the address is in use.
  virtual absl::Status Start() = 0;
  virtual int port() const = 0;  // the bound port, after Start()

  // Stops accepting, lets in-flight responses finish for up to `drain`, then closes every
  // connection (their OnClose callbacks run) and joins the I/O threads. Idempotent.
  virtual void Shutdown(absl::Duration drain) = 0;

  virtual int64_t open_connections() const = 0;

  // "" for plaintext; else what the server presents now, for logs:
  // "HTTPS, certificate CN=api.example.com, expires 2027-01-01T00:00:00Z".
  virtual std::string tls_description() const = 0;
};

// {"error": {"message", "type", "param", "code"}} with the given status; type follows OpenAI
// ("invalid_request_error", "not_found_error", ...).
void RespondError(ResponseWriter& writer, int status, std::string_view message,
                  std::string_view type, std::string_view param = {}, std::string_view code = {});

// The body RespondError sends: an empty `param` or `code` becomes JSON null. For callers that
// need extra headers or send the error as an SSE event.
std::string ErrorJson(std::string_view message, std::string_view type, std::string_view param = {},
                      std::string_view code = {});

}  // namespace strata::http
