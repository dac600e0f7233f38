#pragma once
// Keyed requests (GenerateRequest.resume) that outlive their Generate stream: when the stream
// breaks (its router died, or the router's client left) or ends, the request keeps running and
// every GenerateResponse it produced is kept, for the grace period, so that another router can
// Attach to it and serve the client that retries. With nobody attached when the grace runs out,
// an unfinished request is cancelled (which frees its KV blocks) and the kept output dropped.
//
// Contract:
// - A key (tenant, key) names at most one held request; Add refuses a key in use.
// - At most one stream (a ResponseSink) has a request at a time. Attach gives it the request's
//   responses from the first one, in order, then the live ones, to the end; a sink that had it
//   is ended with ABORTED first.
// - Memory: the responses of each held request (at most its own output), for the requests
//   running here and, once ended, for at most kMaxEnded more whose grace has not run out.
// Threading: every method is thread-safe. Sinks are called with the request's lock held: they
// must queue and return, never call back in.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "strata/proto/protocol.h"

namespace strata::worker {

// Where a held request's responses go: a Generate or Attach stream.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // The sink now has the request (Attach): sent before the first replayed response.
  virtual void Begin() {}
  // One response; `last` ends the stream with OK after it.
  virtual void Send(const v1::GenerateResponse& response, bool last) = 0;
  // Ends the stream with an error.
  virtual void End(const grpc::Status& status) = 0;
};

// One held request; shared by the registry and the engine's output callback.
class HeldRequest {
 public:
  HeldRequest(std::string map_key, uint64_t fingerprint, std::function<void()> cancel,
              ResponseSink* sink)
      : map_key_(std::move(map_key)),
        fingerprint_(fingerprint),
        cancel_(std::move(cancel)),
        sink_(sink) {}

  // From the engine: the request's next response (`last`: its final one), or its failure.
  void Output(v1::GenerateResponse response, bool last);
  void Fail(const grpc::Status& status);

 private:
  friend class HeldRequests;
  // The sink's stream is over (broken, cancelled or complete); a no-op unless it has the
  // request. Returns true when the request was detached now.
  bool Detach(ResponseSink* sink, absl::Time deadline);
  // Gives the request to `sink`: replays every response, then forwards the live ones.
  void AttachLocked(ResponseSink* sink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string map_key_;
  const uint64_t fingerprint_;
  const std::function<void()> cancel_;
  absl::Mutex mu_;
  ResponseSink* sink_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GenerateResponse> responses_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // its last response or its failure came
  std::optional<grpc::Status> failure_ ABSL_GUARDED_BY(mu_);
  // Set while no sink has it: when the grace runs out.
  std::optional<absl::Time> deadline_ ABSL_GUARDED_BY(mu_);
};

class HeldRequests {
 public:
  // Ended requests kept beyond those running; the ones nearest their deadline go first.
  static constexpr size_t kMaxEnded = 4096;
  // `grace` > 0. A thread expires requests within a tenth of the grace (at most a second).
  explicit HeldRequests(absl::Duration grace);
  ~HeldRequests();

  // Holds a new keyed request streaming to `sink`; `cancel` stops it in the engine. Its
  // outputs go through the returned HeldRequest. ALREADY_EXISTS when the key is held.
  absl::StatusOr<std::shared_ptr<HeldRequest>> Add(const v1::ResumeKey& key,
                                                   std::function<void()> cancel,
                                                   ResponseSink* sink);
  // Gives the held request to `sink` (see the contract above); the request is returned so the
  // sink can Detach when its stream ends. NOT_FOUND: no such key (or tenant), or its grace ran
  // out; FAILED_PRECONDITION: the key names a request with another fingerprint.
  absl::StatusOr<std::shared_ptr<HeldRequest>> Attach(const v1::ResumeKey& key, ResponseSink* sink);
  // `sink`'s stream is over: the request waits for an Attach for the grace period.
  void Detach(const std::shared_ptr<HeldRequest>& held, ResponseSink* sink);

  absl::Duration grace() const { return grace_; }
  // Requests held now (running or kept).
  size_t size() const;
  // Runs the expiry now (tests).
  void ExpireForTest() { Expire(absl::Now()); }

 private:
  static std::string MapKey(const v1::ResumeKey& key);
  void Expire(absl::Time now);
  // Drops the ended, detached requests nearest their deadline while more than kMaxEnded wait.
  void TrimEndedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration grace_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<HeldRequest>> held_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace strata::worker
