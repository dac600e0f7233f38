#include "worker_service.h"

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/logging.h"
#include "strata/decode/decode_service.h"
#include "strata/prefill/prefill_service.h"

namespace strata::worker {
namespace {

// Streams one request's outputs. Outputs arrive on the engine thread and are queued; one
// write is in flight at a time. The reactor deletes itself in OnDone; outputs arriving after
// that find `alive_` false and are dropped.
class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit GenerateReactor(std::function<void()> cancel) : cancel_(std::move(cancel)) {}

  // From any thread: queue a message (`last` ends the stream with OK) or end with an error.
  void Push(v1::GenerateResponse msg, bool last) {
    absl::MutexLock lock(&mu_);
    if (!alive_ || finishing_) return;
    queue_.push_back(std::move(msg));
    if (last) end_after_queue_ = true;
    MaybeWriteLocked();
  }
  void Fail(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (!alive_ || finishing_) return;
    finishing_ = true;
    if (!writing_) Finish(std::move(status));
    else pending_status_ = std::move(status);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {  // the router went away; OnCancel will follow
      finishing_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
      return;
    }
    if (pending_status_) {
      Finish(*pending_status_);
      return;
    }
    MaybeWriteLocked();
  }
  void OnCancel() override { cancel_(); }
  void OnDone() override {
    bool completed;
    {
      absl::MutexLock lock(&mu_);
      alive_ = false;
      completed = completed_;
    }
    // A stream that ended early (router gone, write failed) may not have seen OnCancel: make
    // sure the request stops and frees its blocks. Cancelling a finished request is a no-op.
    if (!completed) cancel_();
    self_.reset();  // may delete this
  }
  std::shared_ptr<GenerateReactor> self_;

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return;
    if (queue_.empty()) return;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty() && end_after_queue_) {
      finishing_ = true;
      completed_ = true;
      StartWriteAndFinish(&current_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    writing_ = true;
    StartWrite(&current_);
  }

  std::function<void()> cancel_;
  absl::Mutex mu_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse current_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_after_queue_ ABSL_GUARDED_BY(mu_) = false;
  bool alive_ ABSL_GUARDED_BY(mu_) = true;
  bool completed_ ABSL_GUARDED_BY(mu_) = false;  // the final message was written
  std::optional<grpc::Status> pending_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

v1::GenerateResponse ToResponse(const RequestOutput& out) {
  v1::GenerateResponse m;
  m.mutable_tokens()->Assign(out.new_tokens.begin(), out.new_tokens.end());
  m.set_text(out.new_text);
  for (const auto& lp : out.logprobs) proto::ToProto(lp, m.add_logprobs());
  m.set_finished(out.finished);
  m.set_finish_reason(FinishReasonName(out.finish_reason));
  m.set_stop_reason(out.stop_reason);
  m.set_prompt_tokens(out.prompt_tokens);
  m.set_cached_tokens(out.cached_tokens);
  m.set_completion_tokens(out.completion_tokens);
  return m;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  const std::string id = request->request_id();
  const int32_t resumed = request->resumed_tokens();
  const bool remote_prefill = decode::WantsRemotePrefill(*request);
  decode::DecodeDriver* decode = decode_;
  EngineLoop* loop = loop_;
  auto reactor = std::make_shared<GenerateReactor>([=] {
    if (remote_prefill) decode->Cancel(id);
    else loop->Abort(id);
  });
  reactor->self_ = reactor;
  grpc::Status bad = proto::CheckVersion(request->protocol_version());
  if (bad.ok() && role_ == v1::ROLE_PREFILL) {
    bad = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a prefill worker does not decode");
  }
  if (bad.ok()) bad = decode::CheckRemotePrefill(*request, decode_);
  if (bad.ok() && (resumed < 0 || resumed >= request->prompt_size())) {
    bad = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "resumed_tokens must be >= 0 and below the prompt's length");
  }
  if (!bad.ok()) {
    reactor->Fail(bad);
    return reactor.get();
  }
  std::weak_ptr<GenerateReactor> weak = reactor;
  OutputCallback on_output = [weak](const absl::Status& st, const RequestOutput& out) {
    auto r = weak.lock();
    if (!r) return;
    if (!st.ok()) {
      r->Fail(proto::ToGrpc(st));
      return;
    }
    r->Push(ToResponse(out), out.finished);
  };
  if (remote_prefill) {
    decode::StartRemotePrefill(*decode_, *request, std::move(on_output));
    return reactor.get();
  }
  std::vector<int32_t> prompt(request->prompt().begin(), request->prompt().end());
  ResumedOutput resumed_output;
  resumed_output.tokens.assign(prompt.end() - resumed, prompt.end());
  resumed_output.text_emitted = request->resumed_text_bytes();
  prompt.resize(prompt.size() - size_t(resumed));
  loop_->Submit(id, std::move(prompt), proto::FromProto(request->params()), std::move(on_output),
                std::move(resumed_output));
  return reactor.get();
}

grpc::ServerUnaryReactor* WorkerService::Prefill(grpc::CallbackServerContext* context,
                                                 const v1::PrefillRequest* request,
                                                 v1::PrefillResponse* response) {
  return prefill::ServePrefill(prefill_, loop_->engine_for_config().model_identity(), context,
                               request, response);
}

grpc::ServerUnaryReactor* WorkerService::AbortPrefill(grpc::CallbackServerContext* context,
                                                      const v1::AbortPrefillRequest* request,
                                                      v1::AbortPrefillResponse* response) {
  return prefill::ServeAbortPrefill(prefill_, context, request);
}

}  // namespace strata::worker
