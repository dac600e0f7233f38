#include "strata/router/registry_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/logging.h"
#include "strata/proto/cluster_tls.h"

namespace strata::router {
namespace {

// With mTLS, the TLS handshake has already proven that the peer holds a certificate of the
// cluster CA. A certificate that names roles (cluster_tls.h PeerRoles) may register only as one
// of them: a kvstore daemon's certificate cannot register a worker, nor a router's either. A
// certificate naming no role may register as anything.
grpc::Status CheckPeerRole(const grpc::ServerContext& context, const v1::WorkerInfo& worker) {
  const std::vector<std::string> roles = proto::PeerRoles(context);
  if (roles.empty()) return grpc::Status::OK;
  std::vector<std::string> allowed;
  switch (worker.role()) {
    case v1::ROLE_KVSTORE:
      allowed = {"kvstore"};
      break;
    case v1::ROLE_PREFILL:
      allowed = {"worker", "prefill"};
      break;
    case v1::ROLE_DECODE:
      allowed = {"worker", "decode"};
      break;
    case v1::ROLE_MIXED:
      allowed = {"worker", "mixed"};
      break;
    default:
      return grpc::Status::OK;  // the pool refuses an unset role
  }
  for (const std::string& r : roles) {
    if (std::find(allowed.begin(), allowed.end(), r) != allowed.end()) return grpc::Status::OK;
  }
  const std::string why =
      absl::StrCat("registration of ", worker.id(), " as ", absl::StrJoin(allowed, "/"),
                   " refused: the peer's certificate (", proto::PeerIdentity(context), ") is for ",
                   absl::StrJoin(roles, ", "));
  STRATA_LOG(Warning) << why;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, why);
}

}  // namespace

grpc::Status RegistryService::Register(grpc::ServerContext* context, const v1::RegisterRequest* req,
                                       v1::RegisterResponse* resp) {
  if (auto v = proto::CheckVersion(req->protocol_version()); !v.ok()) return v;
  if (auto s = CheckPeerRole(*context, req->worker()); !s.ok()) return s;
  auto epoch = pool_->Register(req->worker(), proto::PeerIdentity(*context));
  if (!epoch.ok()) return proto::ToGrpc(epoch.status());
  resp->set_epoch(*epoch);
  for (std::string& a : pool_->KvstoreAddresses()) resp->add_kvstore_addresses(std::move(a));
  return grpc::Status::OK;
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext* context,
                                        const v1::HeartbeatRequest* req,
                                        v1::HeartbeatResponse* resp) {
  if (auto v = proto::CheckVersion(req->protocol_version()); !v.ok()) return v;
  const absl::Status beat = pool_->Heartbeat(*req, proto::PeerIdentity(*context));
  if (beat.code() == absl::StatusCode::kPermissionDenied) return proto::ToGrpc(beat);
  const bool known = beat.ok();
  resp->set_reregister(!known);
  if (known) {
    for (std::string& a : pool_->KvstoreAddresses()) resp->add_kvstore_addresses(std::move(a));
    if (on_heartbeat_) on_heartbeat_();
  }
  return grpc::Status::OK;
}

grpc::Status RegistryService::Deregister(grpc::ServerContext* context,
                                         const v1::DeregisterRequest* req,
                                         v1::DeregisterResponse*) {
  if (auto v = proto::CheckVersion(req->protocol_version()); !v.ok()) return v;
  pool_->Deregister(req->worker_id(), proto::PeerIdentity(*context));
  return grpc::Status::OK;
}

}  // namespace strata::router
