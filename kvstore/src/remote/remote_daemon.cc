#include "remote_daemon.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/proto/protocol.h"

namespace strata::kvstore::remote {

void Owed::ToProto(v1::KvSettle* settle) const {
  for (const OwedCommit& c : commits) {
    v1::KvCommit* out = settle->add_commits();
    out->set_reservation_id(c.reservation_id);
    out->set_checksum(c.checksum);
  }
  for (uint64_t id : aborts) settle->add_abort_ids(id);
  for (uint64_t id : releases) settle->add_release_ids(id);
}

namespace {

// Moves up to `limit` entries from `from` into a new Owed (commits first: they publish blocks).
Owed TakeUpTo(Owed& from, size_t limit) {
  Owed out{.instance = from.instance};
  if (from.size() <= limit) {
    std::swap(out, from);
    from.instance = out.instance;
    return out;
  }
  auto move_some = [&limit](auto& src, auto& dst) {
    const size_t n = std::min(limit, src.size());
    dst.assign(std::make_move_iterator(src.begin()), std::make_move_iterator(src.begin() + n));
    src.erase(src.begin(), src.begin() + n);
    limit -= n;
  };
  move_some(from.commits, out.commits);
  move_some(from.aborts, out.aborts);
  move_some(from.releases, out.releases);
  return out;
}

absl::Status Lost(const std::string& address) {
  return absl::UnavailableError(
      absl::StrCat("kvstore ", address, " restarted or was lost before it was settled"));
}

}  // namespace

Daemon::Daemon(std::string address, transport::Agent* agent, const RemoteTierOptions& options,
               CommitsSettled on_commits)
    : address_(std::move(address)),
      agent_(agent),
      options_(options),
      on_commits_(std::move(on_commits)),
      stub_(v1::KvStore::NewStub(proto::MakeChannel(address_))) {}

void Daemon::Owe(const Session& session, Owed more) {
  if (more.empty()) return;
  Owed lost;
  {
    absl::MutexLock lock(&owed_mu_);
    lost = DropStaleLocked(session.instance);
    if (owed_.empty()) owed_since_ = absl::Now();
    auto append = [](auto& dst, auto& src) {
      dst.insert(dst.end(), std::make_move_iterator(src.begin()),
                 std::make_move_iterator(src.end()));
    };
    append(owed_.commits, more.commits);
    append(owed_.aborts, more.aborts);
    append(owed_.releases, more.releases);
  }
  Settled(lost, {}, Lost(address_));
}

absl::Time Daemon::OwedSince() const {
  absl::MutexLock lock(&owed_mu_);
  return owed_.empty() ? absl::InfiniteFuture() : owed_since_;
}

Owed Daemon::TakeOwed(const Session& session) {
  Owed taken;
  Owed lost;
  {
    absl::MutexLock lock(&owed_mu_);
    owed_mu_.Await(absl::Condition(
        +[](bool* flushing) { return !*flushing; }, &flushing_));
    lost = DropStaleLocked(session.instance);
    taken = TakeUpTo(owed_, kMaxKvBlocksPerRequest);
    owed_since_ = absl::Now();  // what is left waits a full delay again
  }
  Settled(lost, {}, Lost(address_));
  return taken;
}

void Daemon::Flush() {
  for (;;) {
    Owed owed;
    {
      absl::MutexLock lock(&owed_mu_);
      owed_mu_.Await(absl::Condition(
          +[](bool* flushing) { return !*flushing; }, &flushing_));
      if (owed_.empty()) return;
      owed = TakeUpTo(owed_, kMaxKvBlocksPerRequest);
      owed_since_ = absl::Now();
      flushing_ = true;  // requests wait for it: it may carry what their callers owe
    }
    absl::Status s;
    v1::KvSettleResponse resp;
    auto session = Connect();
    if (!session.ok() || session->instance != owed.instance) {
      s = Lost(address_);
    } else {
      v1::KvSettleRequest req;
      req.set_protocol_version(proto_version());
      req.set_instance(owed.instance);
      owed.ToProto(req.mutable_settle());
      grpc::ClientContext ctx;
      ctx.set_deadline(Deadline());
      s = FromGrpc(stub_->Settle(&ctx, req, &resp));
      if (!s.ok() && IsDaemonFailure(s)) Drop(*session, s);
    }
    {
      absl::MutexLock lock(&owed_mu_);
      flushing_ = false;
    }
    Answered(owed, resp.commit_codes(), &s);
  }
}

Owed Daemon::DropStaleLocked(uint64_t instance) {
  Owed lost;
  if (owed_.instance != instance) {
    std::swap(lost, owed_);
    owed_.instance = instance;
  }
  return lost;
}

void Daemon::Answered(const Owed& owed, const google::protobuf::RepeatedField<uint32_t>& codes,
                      absl::Status* s) {
  if (s->ok() && codes.size() != static_cast<int>(owed.commits.size())) {
    *s = absl::InternalError("kvstore answered a settle for the wrong number of commits");
  }
  Settled(owed, s->ok() ? std::span<const uint32_t>(codes.data(), codes.size())
                        : std::span<const uint32_t>(),
          *s);
}

void Daemon::Settled(const Owed& owed, std::span<const uint32_t> codes,
                     const absl::Status& error) {
  if (owed.commits.empty() || !on_commits_) return;
  on_commits_(owed.commits, codes, error);
}

uint32_t Daemon::proto_version() { return proto::kProtocolVersion; }

absl::Status Daemon::FromGrpc(const grpc::Status& s) { return proto::FromGrpc(s); }

std::chrono::system_clock::time_point Daemon::Deadline() const {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(absl::ToInt64Microseconds(options_.rpc_timeout));
}

bool Daemon::IsDaemonFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         (absl::IsFailedPrecondition(s) && absl::StartsWith(s.message(), "stale instance"));
}

absl::StatusOr<Session> Daemon::Connect() {
  absl::MutexLock lock(&mu_);
  if (session_) return *session_;
  if (absl::Now() < retry_after_) {
    return absl::UnavailableError(
        absl::StrCat("kvstore ", address_, " is unreachable: ", last_error_.message()));
  }
  auto s = HelloLocked();
  if (!s.ok()) {
    last_error_ = s.status();
    retry_after_ = absl::Now() + options_.reconnect_interval;
    return absl::UnavailableError(
        absl::StrCat("kvstore ", address_, " is unreachable: ", s.status().message()));
  }
  session_ = *s;
  return *s;
}

absl::StatusOr<Session> Daemon::HelloLocked() {
  v1::KvHelloRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  req.set_client_agent(agent_->name());
  req.set_block_bytes(options_.block_bytes);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  v1::KvHelloResponse resp;
  STRATA_RETURN_IF_ERROR(proto::FromGrpc(stub_->Hello(&ctx, req, &resp)));
  if (resp.block_bytes() != options_.block_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it holds blocks of ", resp.block_bytes(), " bytes, not ", options_.block_bytes));
  }
  STRATA_RETURN_IF_ERROR(agent_->AddPeer(peer(), resp.agent_metadata()));
  STRATA_ASSIGN_OR_RETURN(uint64_t region, agent_->ImportRegion(peer(), resp.region()));
  STRATA_LOG(Info) << "connected to kvstore " << resp.daemon_id() << " at " << address_;
  return Session{.instance = resp.instance(), .remote_region = region};
}

bool Daemon::connected() const {
  absl::MutexLock lock(&mu_);
  return session_.has_value();
}

void Daemon::Drop(const Session& session, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (!session_ || session_->instance != session.instance) return;
  STRATA_LOG(Warning) << "kvstore " << address_ << " lost: " << why.message();
  session_.reset();
  last_error_ = why;
}

absl::StatusOr<v1::KvStatsResponse> Daemon::Stats() {
  Flush();
  v1::KvStatsRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  v1::KvStatsResponse resp;
  STRATA_RETURN_IF_ERROR(proto::FromGrpc(stub_->Stats(&ctx, req, &resp)));
  return resp;
}

}  // namespace strata::kvstore::remote
