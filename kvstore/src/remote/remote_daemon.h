#pragma once
// One kvstore daemon as a RemoteTier (remote_tier.h) sees it: the gRPC stub, the session
// (Hello done, peer added, pool region imported), re-established after failures, and what the
// tier owes the daemon (proto KvSettle: commits of finished puts, aborts, releases of finished
// reads), carried on the next ReserveWrite or Acquire or sent alone by Flush.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

// A put whose bytes are in the daemon's slot; published once the daemon applies the commit.
struct OwedCommit {
  uint64_t reservation_id = 0;
  uint64_t checksum = 0;
  BlockMeta meta;
};

// What the tier owes one daemon start (`instance`): a KvSettle plus the commits' blocks.
struct Owed {
  uint64_t instance = 0;
  std::vector<OwedCommit> commits;
  std::vector<uint64_t> aborts;
  std::vector<uint64_t> releases;

  bool empty() const { return commits.empty() && aborts.empty() && releases.empty(); }
  size_t size() const { return commits.size() + aborts.size() + releases.size(); }
  void ToProto(v1::KvSettle* settle) const;
};

// Told how the daemon answered owed commits: one code per commit (google.rpc.Code numbering),
// or `error` (codes empty) when they were lost: the RPC that carried them failed, or the daemon
// restarted before they were sent. Runs on the thread that sent them, with no lock held.
using CommitsSettled = std::function<void(std::span<const OwedCommit> commits,
                                          std::span<const uint32_t> codes,
                                          const absl::Status& error)>;

class Daemon {
 public:
  Daemon(std::string address, transport::Agent* agent, const RemoteTierOptions& options,
         CommitsSettled on_commits);
  // Flushes what is still owed (a daemon that left the tier while an operation held it).
  ~Daemon() { Flush(); }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

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

  // Adds to what the tier owes `session` (entries owed to an older session are lost: that
  // daemon start is gone, and its reservations and leases with it).
  void Owe(const Session& session, Owed more) ABSL_LOCKS_EXCLUDED(owed_mu_);
  // When the oldest entry still owed was added; InfiniteFuture when nothing is owed.
  absl::Time OwedSince() const ABSL_LOCKS_EXCLUDED(owed_mu_);
  // Sends what is owed now, alone (Settle), and waits for the answer. Nothing to do when
  // nothing is owed; owed entries are lost (and reported) when the daemon cannot be reached.
  void Flush() ABSL_LOCKS_EXCLUDED(owed_mu_);

  // One unary RPC with the tier's deadline. A ReserveWrite or Acquire carries what is owed (up
  // to kMaxKvBlocksPerRequest entries), applied by the daemon first; before any other request
  // the owed entries are flushed. Either way the daemon has applied them before it serves the
  // request, so a caller sees its own finished puts and reads. A transport-level failure (the
  // daemon is gone or restarted) drops `session` before returning the error.
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(
      const Session& session,
      grpc::Status (v1::KvStore::Stub::*rpc)(grpc::ClientContext*, const Req&, Resp*),
      Req request) {
    constexpr bool kCarries = requires(Req& r) { r.mutable_settle(); };
    Owed owed;
    if constexpr (kCarries) {
      owed = TakeOwed(session);
      owed.ToProto(request.mutable_settle());
    } else {
      Flush();
    }
    request.set_protocol_version(proto_version());
    request.set_instance(session.instance);
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline());
    Resp resp;
    absl::Status s = FromGrpc((stub_.get()->*rpc)(&ctx, request, &resp));
    if (!s.ok() && IsDaemonFailure(s)) {
      Drop(session, s);
      s = absl::UnavailableError(absl::StrCat("kvstore ", address_, ": ", s.message()));
    }
    if constexpr (kCarries) Answered(owed, resp.commit_codes(), &s);
    if (!s.ok()) return s;
    return resp;
  }
  // Stats needs no session (what is owed is flushed first, so the counts include it).
  absl::StatusOr<v1::KvStatsResponse> Stats();

  // Unavailable, DeadlineExceeded or a stale-instance FailedPrecondition.
  static bool IsDaemonFailure(const absl::Status& s);

 private:
  static uint32_t proto_version();
  static absl::Status FromGrpc(const grpc::Status& s);
  std::chrono::system_clock::time_point Deadline() const;
  absl::StatusOr<Session> HelloLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes up to kMaxKvBlocksPerRequest owed entries for a request to `session`, after a Flush
  // in flight (whose entries may include what this caller owes) was answered.
  Owed TakeOwed(const Session& session) ABSL_LOCKS_EXCLUDED(owed_mu_);
  // Reports the commits of `owed` to on_commits_ (lost, with `error`, when codes is empty).
  void Settled(const Owed& owed, std::span<const uint32_t> codes, const absl::Status& error);
  // Reports `owed` as the daemon answered it: its commit codes when the RPC that carried it
  // succeeded (*s becomes Internal if they do not match the commits one for one), else lost.
  void Answered(const Owed& owed, const google::protobuf::RepeatedField<uint32_t>& codes,
                absl::Status* s);
  // Empties what is owed to an older daemon start than `instance` and returns it (lost).
  Owed DropStaleLocked(uint64_t instance) ABSL_EXCLUSIVE_LOCKS_REQUIRED(owed_mu_);

  const std::string address_;
  transport::Agent* const agent_;
  const RemoteTierOptions& options_;
  const CommitsSettled on_commits_;
  std::unique_ptr<v1::KvStore::Stub> stub_;
  mutable absl::Mutex mu_;
  std::optional<Session> session_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex owed_mu_;
  Owed owed_ ABSL_GUARDED_BY(owed_mu_);
  absl::Time owed_since_ ABSL_GUARDED_BY(owed_mu_) = absl::InfiniteFuture();
  bool flushing_ ABSL_GUARDED_BY(owed_mu_) = false;  // a Flush's settle is in flight
};

}  // namespace strata::kvstore::remote
