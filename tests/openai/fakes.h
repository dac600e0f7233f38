#pragma once
// Test doubles for the OpenAI front end: a ResponseWriter that captures what a handler sends,
// and a Backend whose events the test scripts.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "strata/http/server.h"
#include "strata/openai/backend.h"

namespace strata::openai::testing {

class FakeWriter : public http::ResponseWriter {
 public:
  void Respond(int status, std::string content_type, std::string body,
               std::map<std::string, std::string> headers) override {
    absl::MutexLock lock(&mu_);
    ++responses_;
    status_ = status;
    content_type_ = std::move(content_type);
    body_ = std::move(body);
    headers_ = std::move(headers);
  }
  bool StartStream(int status, std::string content_type,
                   std::map<std::string, std::string> headers) override {
    absl::MutexLock lock(&mu_);
    ++responses_;
    status_ = status;
    content_type_ = std::move(content_type);
    streaming_ = true;
    return !closed_;
  }
  bool Write(std::string data) override {
    absl::MutexLock lock(&mu_);
    if (ended_) ++writes_after_end_;
    body_ += data;
    return !closed_;
  }
  void End() override {
    absl::MutexLock lock(&mu_);
    ended_ = true;
  }
  bool IsClosed() const override {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  void OnClose(std::function<void()> callback) override {
    bool run_now;
    {
      absl::MutexLock lock(&mu_);
      run_now = closed_;
      if (!run_now) on_close_.push_back(std::move(callback));
    }
    if (run_now) callback();
  }

  // Simulates the client disconnecting.
  void Disconnect() {
    std::vector<std::function<void()>> callbacks;
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      callbacks.swap(on_close_);
    }
    for (auto& c : callbacks) c();
  }

  int status() const { absl::MutexLock l(&mu_); return status_; }
  int responses() const { absl::MutexLock l(&mu_); return responses_; }
  std::string body() const { absl::MutexLock l(&mu_); return body_; }
  std::string content_type() const { absl::MutexLock l(&mu_); return content_type_; }
  // A header of the last Respond() ("" if absent).
  std::string header(const std::string& name) const {
    absl::MutexLock l(&mu_);
    auto it = headers_.find(name);
    return it == headers_.end() ? "" : it->second;
  }
  bool streaming() const { absl::MutexLock l(&mu_); return streaming_; }
  bool ended() const { absl::MutexLock l(&mu_); return ended_; }
  int writes_after_end() const { absl::MutexLock l(&mu_); return writes_after_end_; }
  nlohmann::ordered_json json() const { return nlohmann::ordered_json::parse(body()); }

  // The SSE payloads ("data: X\n\n" -> X), in order; "[DONE]" included verbatim.
  std::vector<std::string> Events() const {
    std::vector<std::string> out;
    const std::string b = body();
    size_t pos = 0;
    while (pos < b.size()) {
      const size_t end = b.find("\n\n", pos);
      if (end == std::string::npos || b.compare(pos, 6, "data: ") != 0) {
        out.push_back("<malformed:" + b.substr(pos) + ">");
        break;
      }
      out.push_back(b.substr(pos + 6, end - pos - 6));
      pos = end + 2;
    }
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  int responses_ = 0;
  int status_ = 0;
  std::string content_type_;
  std::string body_;
  std::map<std::string, std::string> headers_;
  bool streaming_ = false;
  bool ended_ = false;
  bool closed_ = false;
  int writes_after_end_ = 0;
  std::vector<std::function<void()>> on_close_;
};

// Records every Generate call; the test emits events for call i with Emit(i, ...). Callbacks
// are dropped after a final event, as a real backend does. `on_generate` (optional) runs inside
// Generate, e.g. to answer synchronously.
class FakeBackend : public Backend {
 public:
  struct Call {
    GenerateRequest request;
    EventCallback callback;
    std::shared_ptr<bool> cancelled = std::make_shared<bool>(false);
  };

  std::unique_ptr<GenerationHandle> Generate(GenerateRequest request,
                                             EventCallback on_event) override {
    int index;
    std::shared_ptr<bool> cancelled;
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(Call{std::move(request), std::move(on_event)});
      index = static_cast<int>(calls_.size()) - 1;
      cancelled = calls_.back().cancelled;
    }
    if (on_generate) on_generate(index);
    return std::make_unique<Handle>(this, cancelled);
  }
  bool Ready() const override { return ready; }
  BackendLoad Load() const override { return load; }

  // Delivers one event to call i (on the calling thread).
  void Emit(int i, GenerateEvent event) {
    EventCallback callback;
    {
      absl::MutexLock lock(&mu_);
      callback = calls_[i].callback;
      if (event.finished || !event.status.ok()) calls_[i].callback = nullptr;
    }
    if (callback) callback(std::move(event));
  }

  int num_calls() const { absl::MutexLock l(&mu_); return static_cast<int>(calls_.size()); }
  GenerateRequest request(int i) const { absl::MutexLock l(&mu_); return calls_[i].request; }
  bool cancelled(int i) const { absl::MutexLock l(&mu_); return *calls_[i].cancelled; }
  int cancel_calls() const { absl::MutexLock l(&mu_); return cancel_calls_; }

  std::function<void(int)> on_generate;
  bool ready = true;
  BackendLoad load;

 private:
  class Handle : public GenerationHandle {
   public:
    Handle(FakeBackend* backend, std::shared_ptr<bool> cancelled)
        : backend_(backend), cancelled_(std::move(cancelled)) {}
    void Cancel() override {
      absl::MutexLock lock(&backend_->mu_);
      *cancelled_ = true;
      ++backend_->cancel_calls_;
    }

   private:
    FakeBackend* backend_;
    std::shared_ptr<bool> cancelled_;
  };

  mutable absl::Mutex mu_;
  std::vector<Call> calls_;
  int cancel_calls_ = 0;
};

// An event carrying tokens and text.
inline GenerateEvent TokensEvent(std::vector<int32_t> tokens, std::string text,
                                 bool finished = false,
                                 FinishReason reason = FinishReason::kNone) {
  GenerateEvent e;
  e.tokens = std::move(tokens);
  e.text = std::move(text);
  e.completion_tokens = 0;
  e.finished = finished;
  e.finish_reason = reason;
  return e;
}

inline GenerateEvent ErrorEvent(absl::Status status) {
  GenerateEvent e;
  e.status = std::move(status);
  return e;
}

}  // namespace strata::openai::testing
