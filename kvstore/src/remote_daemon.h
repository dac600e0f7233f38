#pragma once
// One kvstore daemon as a RemoteTier (remote_tier.h) sees it: the gRPC stub and the session
// (Hello done, peer added, pool region imported), re-established after failures.
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/kvstore/remote_tier.h"
#include "strata/proto/kvstore.grpc.pb.h"
#include "strata/transport/agent.h"

namespace strata::kvstore::remote {

// What a connected daemon's transfers need.
struct Session {
  uint64_t instance = 0;       // the daemon start the offsets belong to
  uint64_t remote_region = 0;  // its pool, imported into our agent
};

class Daemon {
 public:
  Daemon(std::string address, transport::Agent* agent, const RemoteTierOptions& options);
  // Waits for releases still in flight (their callbacks refer to this object).
  ~Daemon();

  const std::string& address() const { return address_; }
  // The transport peer name of this daemon in our agent (its address: unique per tier).
  const std::string& peer() const { return address_; }

  // The current session, connecting first if there is none (at most once per
  // reconnect_interval after a failed attempt). Unavailable while the daemon is unreachable.
  absl::StatusOr<Session> Connect() ABSL_LOCKS_EXCLUDED(mu_);
  bool connected() const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops `session` after a failure that may mean the daemon is gone or restarted (a no-op if
  // a newer session replaced it already).
  void Drop(const Session& session, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // One unary RPC with the tier's deadline. A transport-level failure (the daemon is gone or
  // restarted) drops `session` before returning the error.
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(
      const Session& session,
      grpc::Status (v1::KvStore::Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
      Req request) {
    AwaitReleases();
    request.set_protocol_version(proto_version());
    request.set_instance(session.instance);
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    Resp resp;
    absl::Status s = FromGrpc((stub_.get()->*rpc)(&ctx, request, &resp));
    if (!s.ok()) {
      if (!IsDaemonFailure(s)) return s;
      Drop(session, s);
      return absl::UnavailableError(absl::StrCat("kvstore ", address_, ": ", s.message()));
    }
    return resp;
  }
  // Sends a Release without waiting for its answer (gRPC's callback API), so a read does not
  // pay a second round trip. Ordered before every later request of this tier to this daemon:
  // Call() first waits until the releases in flight were answered (or failed: a lease the
  // daemon never hears about expires by itself). A daemon failure drops `session`.
  void ReleaseAsync(const Session& session, v1::KvReleaseRequest request)
      ABSL_LOCKS_EXCLUDED(release_mu_);
  // Stats needs no session.
  absl::StatusOr<v1::KvStatsResponse> Stats();

  // Unavailable, DeadlineExceeded or a stale-instance FailedPrecondition.
  static bool IsDaemonFailure(const absl::Status& s);

 private:
  static uint32_t proto_version();
  static absl::Status FromGrpc(const grpc::Status& s);
  std::chrono::system_clock::time_point Deadline() const;
  absl::StatusOr<Session> HelloLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AwaitReleases() ABSL_LOCKS_EXCLUDED(release_mu_);

  const std::string address_;
  transport::Agent* const agent_;
  const RemoteTierOptions& options_;
  std::unique_ptr<v1::KvStore::Stub> stub_;
  mutable absl::Mutex mu_;
  std::optional<Session> session_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  absl::Mutex release_mu_;
  int releases_in_flight_ ABSL_GUARDED_BY(release_mu_) = 0;
};

}  // namespace strata::kvstore::remote
