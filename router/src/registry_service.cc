#include "strata/router/registry_service.h"

namespace strata::router {

grpc::Status RegistryService::Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                                       v1::RegisterResponse* resp) {
  if (auto v = proto::CheckVersion(req->protocol_version()); !v.ok()) return v;
  auto epoch = pool_->Register(req->worker());
  if (!epoch.ok()) return proto::ToGrpc(epoch.status());
  resp->set_epoch(*epoch);
  for (std::string& a : pool_->KvstoreAddresses()) resp->add_kvstore_addresses(std::move(a));
  return grpc::Status::OK;
}

grpc::Status RegistryService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                        v1::HeartbeatResponse* resp) {
  if (auto v = proto::CheckVersion(req->protocol_version()); !v.ok()) return v;
  const bool known = pool_->Heartbeat(*req).ok();
  resp->set_reregister(!known);
  if (known) {
    for (std::string& a : pool_->KvstoreAddresses()) resp->add_kvstore_addresses(std::move(a));
    if (on_heartbeat_) on_heartbeat_();
  }
  return grpc::Status::OK;
}

grpc::Status RegistryService::Deregister(grpc::ServerContext*, const v1::DeregisterRequest* req,
                                         v1::DeregisterResponse*) {
  if (auto v = proto::CheckVersion(req->protocol_version()); !v.ok()) return v;
  pool_->Remove(req->worker_id(), "deregistered");
  return grpc::Status::OK;
}

}  // namespace strata::router
