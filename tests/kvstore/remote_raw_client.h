#pragma once
// A raw client of the KvStore gRPC service, for the G4 tests: what RemoteTier never sends on
// its own (a stale protocol version, a commit of a chosen checksum), or what another client of
// a shared daemon would hold (leases, reservations).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "strata/proto/kvstore.grpc.pb.h"
#include "strata/proto/protocol.h"

namespace strata::kvstore::testing {

struct RawKvClient {
  explicit RawKvClient(const std::string& address)
      : stub(v1::KvStore::NewStub(proto::MakeChannel(address))) {}
  // version 0: the current protocol version.
  grpc::Status Hello(uint64_t block_bytes, v1::KvHelloResponse* resp, uint32_t version = 0) {
    grpc::ClientContext ctx;
    v1::KvHelloRequest req;
    req.set_protocol_version(version == 0 ? proto::kProtocolVersion : version);
    req.set_block_bytes(block_bytes);
    return stub->Hello(&ctx, req, resp);
  }
  grpc::Status Acquire(uint64_t instance, std::vector<uint64_t> hashes, v1::KvAcquireResponse* r) {
    grpc::ClientContext ctx;
    v1::KvAcquireRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_instance(instance);
    for (uint64_t h : hashes) req.add_hashes(h);
    return stub->Acquire(&ctx, req, r);
  }
  grpc::Status Reserve(uint64_t instance, std::vector<uint64_t> hashes,
                       v1::KvReserveWriteResponse* r) {
    grpc::ClientContext ctx;
    v1::KvReserveWriteRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_instance(instance);
    for (uint64_t h : hashes) req.add_blocks()->set_hash(h);
    return stub->ReserveWrite(&ctx, req, r);
  }
  grpc::Status Commit(uint64_t instance, uint64_t reservation, uint64_t checksum,
                      v1::KvSettleResponse* r) {
    grpc::ClientContext ctx;
    v1::KvSettleRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_instance(instance);
    v1::KvCommit* c = req.mutable_settle()->add_commits();
    c->set_reservation_id(reservation);
    c->set_checksum(checksum);
    return stub->Settle(&ctx, req, r);
  }
  std::unique_ptr<v1::KvStore::Stub> stub;
};

}  // namespace strata::kvstore::testing
