#pragma once
// The router's Registry gRPC service (strata.proto) over its WorkerPool: workers and kvstore
// daemons register, heartbeat (load and KV events) and deregister here. With cluster mTLS
// (proto/cluster_tls.h) only peers with a certificate of the cluster CA reach it, and a
// certificate that names roles registers only as one of them; a worker id, once registered, is
// bound to its certificate's identity (WorkerPool::Register).
#include <functional>

#include "strata/proto/protocol.h"
#include "strata/router/worker_pool.h"

namespace strata::router {

class RegistryService final : public v1::Registry::Service {
 public:
  // `pool` must outlive the service. `on_heartbeat` (may be null) runs after every accepted
  // heartbeat (the workers' load changed).
  RegistryService(WorkerPool* pool, std::function<void()> on_heartbeat)
      : pool_(pool), on_heartbeat_(std::move(on_heartbeat)) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status Deregister(grpc::ServerContext* context, const v1::DeregisterRequest* req,
                          v1::DeregisterResponse*) override;

 private:
  WorkerPool* pool_;
  std::function<void()> on_heartbeat_;
};

}  // namespace strata::router
