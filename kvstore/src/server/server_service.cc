// The KvStore gRPC service (proto/kvstore.proto) over the daemon's pool.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "strata/common/logging.h"
#include "strata/proto/protocol.h"
#include "server_internal.h"

namespace strata::kvstore::server {
namespace {

grpc::Status Error(grpc::StatusCode code, std::string message) {
  return grpc::Status(code, std::move(message));
}

class Service final : public v1::KvStore::Service {
 public:
  Service(const KvStoreServerOptions& options, uint64_t instance, Pool* pool,
          metrics::CounterFamily* rpcs)
      : options_(options), instance_(instance), pool_(pool), rpcs_(rpcs) {}

  grpc::Status Hello(grpc::ServerContext*, const v1::KvHelloRequest* req,
                     v1::KvHelloResponse* resp) override {
    return Count("Hello", DoHello(*req, resp));
  }
  grpc::Status Lookup(grpc::ServerContext*, const v1::KvLookupRequest* req,
                      v1::KvLookupResponse* resp) override {
    return Count("Lookup", DoLookup(*req, resp));
  }
  grpc::Status ReserveWrite(grpc::ServerContext*, const v1::KvReserveWriteRequest* req,
                            v1::KvReserveWriteResponse* resp) override {
    return Count("ReserveWrite", DoReserveWrite(*req, resp));
  }
  grpc::Status Acquire(grpc::ServerContext*, const v1::KvAcquireRequest* req,
                       v1::KvAcquireResponse* resp) override {
    return Count("Acquire", DoAcquire(*req, resp));
  }
  grpc::Status Settle(grpc::ServerContext*, const v1::KvSettleRequest* req,
                      v1::KvSettleResponse* resp) override {
    return Count("Settle", DoSettle(*req, resp));
  }
  grpc::Status Erase(grpc::ServerContext*, const v1::KvEraseRequest* req,
                     v1::KvEraseResponse*) override {
    return Count("Erase", DoErase(*req));
  }
  grpc::Status Stats(grpc::ServerContext*, const v1::KvStatsRequest* req,
                     v1::KvStatsResponse* resp) override {
    return Count("Stats", DoStats(*req, resp));
  }

 private:
  grpc::Status Count(const char* method, grpc::Status status) {
    if (rpcs_ != nullptr) {
      rpcs_->WithLabels({method, std::to_string(static_cast<int>(status.error_code()))})
          ->Increment();
    }
    return status;
  }

  // The checks every request after Hello passes: version, instance, pool, size bounds (`count`
  // blocks named, `settle` entries carried).
  grpc::Status Admit(uint32_t version, uint64_t instance, int count, HostTier** tier,
                     const v1::KvSettle* settle = nullptr) const {
    if (auto v = proto::CheckVersion(version); !v.ok()) return v;
    if (instance != instance_) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   absl::StrCat("stale instance ", instance, ": kvstore ", options_.id,
                                " restarted (now ", instance_, "); say Hello again"));
    }
    if (count > kMaxKvBlocksPerRequest) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat(count, " blocks in one request; the limit is ",
                                kMaxKvBlocksPerRequest));
    }
    if (const int n = settle == nullptr ? 0 : SettleEntries(*settle); n > kMaxKvBlocksPerRequest) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat(n, " settle entries in one request; the limit is ",
                                kMaxKvBlocksPerRequest));
    }
    *tier = pool_->tier();
    if (*tier == nullptr) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "no pool yet: say Hello first");
    }
    return grpc::Status::OK;
  }

  grpc::Status DoHello(const v1::KvHelloRequest& req, v1::KvHelloResponse* resp) {
    if (auto v = proto::CheckVersion(req.protocol_version()); !v.ok()) return v;
    size_t block_bytes = req.block_bytes();
    if (HostTier* t = pool_->tier(); block_bytes == 0 && t != nullptr) {
      block_bytes = t->block_bytes();
    }
    auto tier = pool_->Ensure(block_bytes);
    if (!tier.ok()) return proto::ToGrpc(tier.status());
    resp->set_daemon_id(options_.id);
    resp->set_agent_name(pool_->agent()->name());
    resp->set_agent_metadata(pool_->agent()->Metadata());
    resp->set_region(pool_->region_blob());
    resp->set_block_bytes((*tier)->block_bytes());
    resp->set_capacity_blocks((*tier)->pool_bytes() / (*tier)->block_bytes());
    resp->set_model_identity(options_.model_identity);
    resp->set_instance(instance_);
    STRATA_LOG(Debug) << "kvstore " << options_.id << ": hello from " << req.client_agent();
    return grpc::Status::OK;
  }

  grpc::Status DoLookup(const v1::KvLookupRequest& req, v1::KvLookupResponse* resp) {
    HostTier* tier = nullptr;
    grpc::Status s = Admit(req.protocol_version(), req.instance(), req.hashes_size(), &tier);
    if (!s.ok()) return s;
    int prefix = 0;
    bool in_prefix = true;
    for (uint64_t h : req.hashes()) {
      const bool present = tier->Contains(h);
      resp->add_present(present);
      in_prefix = in_prefix && present;
      if (in_prefix) ++prefix;
    }
    resp->set_prefix(prefix);
    return grpc::Status::OK;
  }

  static int SettleEntries(const v1::KvSettle& settle) {
    return settle.commits_size() + settle.abort_ids_size() + settle.release_ids_size();
  }

  // Applies what a client owed (releases, aborts, then commits), before the request it rode on.
  // A commit is trusted: the writer checksummed the very bytes its transfer put in the slot, so
  // the slot is not read back here; readers verify.
  void ApplySettle(HostTier* tier, const v1::KvSettle& settle,
                   google::protobuf::RepeatedField<uint32_t>* codes) const {
    if (settle.release_ids_size() > 0 && options_.release_delay_for_test > absl::ZeroDuration()) {
      absl::SleepFor(options_.release_delay_for_test);
    }
    for (uint64_t id : settle.release_ids()) tier->Release(id);
    for (uint64_t id : settle.abort_ids()) tier->AbortWrite(id);
    for (const v1::KvCommit& c : settle.commits()) {
      const absl::Status r = tier->CommitWriteUnverified(c.reservation_id(), c.checksum());
      codes->Add(static_cast<uint32_t>(r.code()));
    }
  }

  grpc::Status DoReserveWrite(const v1::KvReserveWriteRequest& req,
                              v1::KvReserveWriteResponse* resp) {
    HostTier* tier = nullptr;
    grpc::Status s =
        Admit(req.protocol_version(), req.instance(), req.blocks_size(), &tier, &req.settle());
    if (!s.ok()) return s;
    ApplySettle(tier, req.settle(), resp->mutable_commit_codes());
    for (const v1::KvBlockMeta& b : req.blocks()) {
      auto r = tier->ReserveWrite({.hash = b.hash(), .parent = b.parent_hash()});
      v1::KvReservation* out = resp->add_reservations();
      out->set_code(static_cast<uint32_t>(r.status().code()));
      if (!r.ok()) continue;
      out->set_id(r->id);
      out->set_offset(r->offset);
    }
    return grpc::Status::OK;
  }

  grpc::Status DoAcquire(const v1::KvAcquireRequest& req, v1::KvAcquireResponse* resp) {
    HostTier* tier = nullptr;
    grpc::Status s =
        Admit(req.protocol_version(), req.instance(), req.hashes_size(), &tier, &req.settle());
    if (!s.ok()) return s;
    ApplySettle(tier, req.settle(), resp->mutable_commit_codes());
    for (uint64_t h : req.hashes()) {
      auto lease = tier->Acquire(h);
      v1::KvLease* out = resp->add_leases();
      out->set_found(lease.ok());
      if (!lease.ok()) continue;
      out->set_id(lease->id);
      out->set_offset(lease->offset);
      out->set_checksum(lease->checksum);
    }
    return grpc::Status::OK;
  }

  grpc::Status DoSettle(const v1::KvSettleRequest& req, v1::KvSettleResponse* resp) {
    HostTier* tier = nullptr;
    grpc::Status s = Admit(req.protocol_version(), req.instance(), 0, &tier, &req.settle());
    if (!s.ok()) return s;
    ApplySettle(tier, req.settle(), resp->mutable_commit_codes());
    return grpc::Status::OK;
  }

  grpc::Status DoErase(const v1::KvEraseRequest& req) {
    HostTier* tier = nullptr;
    grpc::Status s = Admit(req.protocol_version(), req.instance(), req.hashes_size(), &tier);
    if (!s.ok()) return s;
    for (uint64_t h : req.hashes()) (void)tier->Erase(h);
    return grpc::Status::OK;
  }

  grpc::Status DoStats(const v1::KvStatsRequest& req, v1::KvStatsResponse* resp) {
    if (auto v = proto::CheckVersion(req.protocol_version()); !v.ok()) return v;
    HostTier* tier = pool_->tier();
    if (tier == nullptr) return grpc::Status::OK;  // nothing held yet
    const TierUsage u = tier->usage();
    const TierStats st = tier->stats();
    resp->set_blocks(u.blocks);
    resp->set_bytes(u.bytes);
    resp->set_capacity_bytes(u.capacity_bytes);
    resp->set_hits(st.hits);
    resp->set_misses(st.misses);
    resp->set_puts(st.puts);
    resp->set_bytes_in(st.bytes_in);
    resp->set_bytes_out(st.bytes_out);
    resp->set_evictions(st.evictions);
    resp->set_checksum_failures(st.checksum_failures);
    resp->set_rejected(st.rejected);
    resp->set_expired_leases(tier->expired_leases());
    return grpc::Status::OK;
  }

  const KvStoreServerOptions& options_;
  const uint64_t instance_;
  Pool* const pool_;
  metrics::CounterFamily* const rpcs_;
};

}  // namespace

std::unique_ptr<v1::KvStore::Service> MakeService(const KvStoreServerOptions& options,
                                                  uint64_t instance, Pool* pool,
                                                  metrics::CounterFamily* rpcs) {
  return std::make_unique<Service>(options, instance, pool, rpcs);
}

}  // namespace strata::kvstore::server
