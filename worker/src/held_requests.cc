#include "held_requests.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata::worker {

void HeldRequest::Output(v1::GenerateResponse response, bool last) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  if (last) ended_ = true;
  if (sink_ != nullptr) sink_->Send(response, last);
  responses_.push_back(std::move(response));
}

void HeldRequest::Fail(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (ended_) return;
  ended_ = true;
  failure_ = status;
  if (sink_ != nullptr) sink_->End(status);
}

bool HeldRequest::Detach(ResponseSink* sink, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (sink_ != sink || sink == nullptr) return false;
  sink_ = nullptr;
  deadline_ = deadline;
  return true;
}

void HeldRequest::AttachLocked(ResponseSink* sink) {
  if (sink_ != nullptr) {
    sink_->End(grpc::Status(grpc::StatusCode::ABORTED,
                            "another stream attached to this request (a client retry)"));
  }
  sink_ = sink;
  deadline_.reset();
  sink->Begin();
  const bool complete = ended_ && !failure_.has_value();
  for (size_t i = 0; i < responses_.size(); ++i) {
    sink->Send(responses_[i], complete && i + 1 == responses_.size());
  }
  if (failure_.has_value()) sink->End(*failure_);
}

HeldRequests::HeldRequests(absl::Duration grace) : grace_(grace) {
  const absl::Duration period = std::clamp(grace_ / 10, absl::Milliseconds(10), absl::Seconds(1));
  reaper_ = std::thread([this, period] {
    while (!stop_.WaitForNotificationWithTimeout(period)) Expire(absl::Now());
  });
}

HeldRequests::~HeldRequests() {
  stop_.Notify();
  reaper_.join();
}

std::string HeldRequests::MapKey(const v1::ResumeKey& key) {
  // Length-prefixed so that no (tenant, key) pair collides with another.
  return absl::StrCat(key.tenant().size(), ":", key.tenant(), key.key());
}

absl::StatusOr<std::shared_ptr<HeldRequest>> HeldRequests::Add(const v1::ResumeKey& key,
                                                               std::function<void()> cancel,
                                                               ResponseSink* sink) {
  std::string map_key = MapKey(key);
  absl::MutexLock lock(&mu_);
  if (held_.contains(map_key)) {
    return absl::AlreadyExistsError(
        "a request with this idempotency key is held here already (attach to it instead)");
  }
  if (held_.size() >= kMaxEnded) TrimEndedLocked();
  auto held = std::make_shared<HeldRequest>(map_key, key.fingerprint(), std::move(cancel), sink);
  held_.emplace(std::move(map_key), held);
  return held;
}

absl::StatusOr<std::shared_ptr<HeldRequest>> HeldRequests::Attach(const v1::ResumeKey& key,
                                                                  ResponseSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(MapKey(key));
  if (it == held_.end()) {
    return absl::NotFoundError("no request with this idempotency key is held here");
  }
  std::shared_ptr<HeldRequest> held = it->second;
  if (held->fingerprint_ != key.fingerprint()) {
    return absl::FailedPreconditionError(
        "the idempotency key belongs to another request (a different prompt or parameters)");
  }
  absl::MutexLock held_lock(&held->mu_);
  if (held->deadline_.has_value() && *held->deadline_ <= absl::Now()) {
    return absl::NotFoundError("the request with this idempotency key was not held any longer");
  }
  held->AttachLocked(sink);
  return held;
}

void HeldRequests::Detach(const std::shared_ptr<HeldRequest>& held, ResponseSink* sink) {
  held->Detach(sink, absl::Now() + grace_);
}

size_t HeldRequests::size() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

void HeldRequests::Expire(absl::Time now) {
  std::vector<std::shared_ptr<HeldRequest>> cancel;
  {
    absl::MutexLock lock(&mu_);
    absl::erase_if(held_, [&](const auto& entry) {
      HeldRequest& h = *entry.second;
      absl::MutexLock held_lock(&h.mu_);
      if (!h.deadline_.has_value() || *h.deadline_ > now) return false;
      if (!h.ended_) cancel.push_back(entry.second);
      return true;
    });
  }
  // Outside the locks: the engine's abort may report the request's end synchronously.
  for (const auto& h : cancel) h->cancel_();
}

void HeldRequests::TrimEndedLocked() {
  std::vector<std::pair<absl::Time, std::string>> ended;
  for (const auto& [key, h] : held_) {
    absl::MutexLock held_lock(&h->mu_);
    if (h->ended_ && h->deadline_.has_value()) ended.emplace_back(*h->deadline_, key);
  }
  if (ended.size() < kMaxEnded) return;
  const size_t drop = ended.size() - kMaxEnded + 1;
  std::nth_element(ended.begin(), ended.begin() + drop, ended.end());
  for (size_t i = 0; i < drop; ++i) held_.erase(ended[i].second);
}

}  // namespace strata::worker
