#include "remote_daemon.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/proto/protocol.h"

namespace strata::kvstore::remote {

Daemon::Daemon(std::string address, transport::Agent* agent, const RemoteTierOptions& options)
    : address_(std::move(address)),
      agent_(agent),
      options_(options),
      stub_(v1::KvStore::NewStub(proto::MakeChannel(address_))) {}

Daemon::~Daemon() { AwaitReleases(); }

void Daemon::AwaitReleases() {
  absl::MutexLock lock(&release_mu_);
  release_mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &releases_in_flight_));
}

void Daemon::ReleaseAsync(const Session& session, v1::KvReleaseRequest request) {
  struct Pending {
    grpc::ClientContext ctx;
    v1::KvReleaseRequest request;
    v1::KvReleaseResponse response;
  };
  auto* p = new Pending;
  p->request = std::move(request);
  p->request.set_protocol_version(proto_version());
  p->request.set_instance(session.instance);
  p->ctx.set_deadline(Deadline());
  {
    absl::MutexLock lock(&release_mu_);
    ++releases_in_flight_;
  }
  // The callback runs on a gRPC thread once the answer (or the deadline) arrives.
  stub_->async()->Release(&p->ctx, &p->request, &p->response,
                          [this, p, session](grpc::Status status) {
                            const absl::Status s = FromGrpc(status);
                            if (!s.ok() && IsDaemonFailure(s)) Drop(session, s);
                            delete p;
                            absl::MutexLock lock(&release_mu_);
                            --releases_in_flight_;
                          });
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
  v1::KvStatsRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline());
  v1::KvStatsResponse resp;
  STRATA_RETURN_IF_ERROR(proto::FromGrpc(stub_->Stats(&ctx, req, &resp)));
  return resp;
}

}  // namespace strata::kvstore::remote
