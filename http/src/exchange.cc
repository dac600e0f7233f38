#include "exchange.h"

#include <utility>

#include "session.h"
#include "wire.h"

namespace strata::http::internal {

Exchange::Exchange(std::shared_ptr<Session> session, bool keep_alive, bool http11)
    : http11_(http11), session_(std::move(session)), keep_alive_(keep_alive) {}

bool Exchange::EnqueueLocked(std::string bytes) {
  if (closed_ || session_ == nullptr) return false;
  pending_.push_back(std::move(bytes));
  if (!flush_posted_) {
    flush_posted_ = true;
    session_->PostFlush(shared_from_this());
  }
  return true;
}

std::shared_ptr<Session> Exchange::CompleteLocked() {
  phase_ = Phase::kDone;
  complete_ = true;
  return std::move(session_);
}

void Exchange::Respond(int status, std::string content_type, std::string body,
                       std::map<std::string, std::string> headers) {
  std::shared_ptr<Session> release;
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kNone || closed_) return;
  ResponseHead head{.status = status,
                    .content_type = std::move(content_type),
                    .headers = std::move(headers),
                    .framing = BodyFraming::kContentLength,
                    .content_length = body.size(),
                    .keep_alive = keep_alive_};
  EnqueueLocked(FormatHead(head));
  if (!body.empty()) EnqueueLocked(std::move(body));
  release = CompleteLocked();
}

bool Exchange::StartStream(int status, std::string content_type,
                           std::map<std::string, std::string> headers) {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kNone || closed_) return false;
  phase_ = Phase::kStreaming;
  chunked_ = http11_;
  if (!chunked_) keep_alive_ = false;  // an HTTP/1.0 body without length ends at close
  ResponseHead head{.status = status,
                    .content_type = std::move(content_type),
                    .headers = std::move(headers),
                    .framing = chunked_ ? BodyFraming::kChunked : BodyFraming::kUntilClose,
                    .keep_alive = keep_alive_};
  return EnqueueLocked(FormatHead(head));
}

bool Exchange::Write(std::string data) {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kStreaming || closed_) return false;
  if (data.empty()) return true;  // an empty chunk would end the body
  return EnqueueLocked(chunked_ ? FormatChunk(data) : std::move(data));
}

void Exchange::End() {
  std::shared_ptr<Session> release;
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kStreaming || closed_) return;
  if (chunked_) EnqueueLocked(std::string(kLastChunk));
  release = CompleteLocked();
}

bool Exchange::IsClosed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

void Exchange::OnClose(std::function<void()> callback) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;  // the response completed: the client can no longer "go away early"
    if (!closed_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

void Exchange::Abandon() {
  std::shared_ptr<Session> release;
  bool respond_500 = false;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || phase_ == Phase::kDone) return;
    if (phase_ == Phase::kStreaming) {
      abort_ = true;
      EnqueueLocked(std::string());  // wakes the connection, which then closes
      release = CompleteLocked();
      return;
    }
    respond_500 = true;
  }
  if (respond_500) {
    Respond(500, "application/json",
            ErrorJson("The request handler did not produce a response.", "server_error"), {});
  }
}

Exchange::Output Exchange::TakeOutput() {
  absl::MutexLock lock(&mu_);
  flush_posted_ = false;
  Output out;
  out.bytes.swap(pending_);
  out.complete = complete_;
  out.abort = abort_;
  return out;
}

void Exchange::Close() {
  std::shared_ptr<Session> release;
  std::vector<std::function<void()>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || finished_) return;
    closed_ = true;
    release = std::move(session_);
    pending_.clear();
    callbacks.swap(callbacks_);
  }
  for (auto& callback : callbacks) callback();
}

void Exchange::Finish() {
  std::vector<std::function<void()>> callbacks;
  absl::MutexLock lock(&mu_);
  finished_ = true;
  callbacks.swap(callbacks_);  // destroyed after the lock is released (declared first)
}

bool Exchange::keep_alive() const {
  absl::MutexLock lock(&mu_);
  return keep_alive_;
}

}  // namespace strata::http::internal
