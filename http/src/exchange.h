#pragma once
// One request/response exchange on a connection, and the ResponseWriter handed to the handler.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "strata/http/server.h"

namespace strata::http::internal {

class Session;

// The response to one request, shared by the handler's writer (any thread) and its connection
// (the connection's strand). Writer calls format bytes and append them to `pending_` under the
// mutex, posting one flush to the connection while bytes wait; the connection takes them in
// order and writes them. The mutex is never held while calling user code or doing I/O.
//
// The exchange holds its connection only while a response may still be produced: once the
// response is complete, abandoned or the exchange is closed, later writer calls touch nothing
// but this object, so a writer may outlive the connection and the server.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  // `http11`: the request was HTTP/1.1 (chunked streams); HTTP/1.0 streams end by closing.
  Exchange(std::shared_ptr<Session> session, bool keep_alive, bool http11);

  // Writer side, any thread: the ResponseWriter contract.
  void Respond(int status, std::string content_type, std::string body,
               std::map<std::string, std::string> headers);
  bool StartStream(int status, std::string content_type,
                   std::map<std::string, std::string> headers);
  bool Write(std::string data);
  void End();
  bool IsClosed() const;
  void OnClose(std::function<void()> callback);
  // The handler dropped its last writer: a response never started becomes a 500; a stream
  // never ended aborts the connection (the client sees a truncated body).
  void Abandon();

  // Connection side, on its strand.
  struct Output {
    std::vector<std::string> bytes;
    bool complete = false;  // the response's last bytes have been handed over
    bool abort = false;     // the stream was abandoned: close the connection after `bytes`
  };
  Output TakeOutput();
  // The client went away (or the server is stopping) before the response completed: later
  // writer calls are no-ops and the OnClose callbacks run, once, on this thread.
  void Close();
  // The response was written completely: the callbacks are dropped without running.
  void Finish();
  // Whether the connection may serve another request after this response.
  bool keep_alive() const;

 private:
  enum class Phase { kNone, kStreaming, kDone };

  // Appends `bytes` and posts a flush unless one is pending. Returns false when closed.
  bool EnqueueLocked(std::string bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The response is fully queued: drop the connection (returned, to be released unlocked).
  std::shared_ptr<Session> CompleteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool http11_;
  mutable absl::Mutex mu_;
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  bool keep_alive_ ABSL_GUARDED_BY(mu_);
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kNone;
  bool chunked_ ABSL_GUARDED_BY(mu_) = false;
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool flush_posted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// What the handler holds. Dropping the last reference abandons the exchange (see Abandon).
class WriterHandle final : public ResponseWriter {
 public:
  explicit WriterHandle(std::shared_ptr<Exchange> exchange) : exchange_(std::move(exchange)) {}
  ~WriterHandle() override { exchange_->Abandon(); }

  void Respond(int status, std::string content_type, std::string body,
               std::map<std::string, std::string> headers) override {
    exchange_->Respond(status, std::move(content_type), std::move(body), std::move(headers));
  }
  bool StartStream(int status, std::string content_type,
                   std::map<std::string, std::string> headers) override {
    return exchange_->StartStream(status, std::move(content_type), std::move(headers));
  }
  bool Write(std::string data) override { return exchange_->Write(std::move(data)); }
  void End() override { exchange_->End(); }
  bool IsClosed() const override { return exchange_->IsClosed(); }
  void OnClose(std::function<void()> callback) override { exchange_->OnClose(std::move(callback)); }

 private:
  std::shared_ptr<Exchange> exchange_;
};

}  // namespace strata::http::internal
