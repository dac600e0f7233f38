#pragma once
// KvStoreServer: the `strata kvstore` daemon, the far end of tier G4 (remote_tier.h).
//
// One process holds KV blocks for other nodes. Its block pool is a HostTier (kind kRemote)
// whose memory comes from the daemon's transport Agent (AllocateMemory), exported once as a
// region, so clients move block bytes with one-sided UCX transfers straight into / out of pool
// slots (on one host a plain shared-memory copy), while the KvStore gRPC service
// (proto/kvstore.proto) hands out slots, leases and checksums, and takes commits (trusting the
// writer's checksum: the slot is not read back) and releases.
//
// Create() allocates the pool's memory (capacity_bytes) and faults it in; its slots are laid out
// then when `block_bytes` is set, or else at the first client's Hello (which fixes the block
// size; later clients must match it). Either way no Hello waits for the memory.
//
// With a router address it registers with the router's Registry as ROLE_KVSTORE and heartbeats
// its pool's store/remove events (tier 3), so the router's KV index knows which daemon holds
// which block: the cluster-wide location index of G4.
//
// Metrics (HTTP GET /metrics, Prometheus text; GET /health answers 200): the per-tier families
// strata_kvstore_*{tier="remote"} (blocks, usage/capacity bytes, hits, misses, puts, bytes in and
// out, evictions, checksum failures, rejected puts, expired leases) and
// strata_kvstore_rpcs_total{method,code}.
//
// Thread-safety: Start/Shutdown from the owning thread; the accessors from any thread.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/common/block_hash.h"

namespace strata::kvstore {

// Requests naming more blocks than this are INVALID_ARGUMENT (keeps every message far below
// the control plane's size cap).
inline constexpr int kMaxKvBlocksPerRequest = 4096;

struct KvStoreServerOptions {
  std::string id = "kvstore-0";  // name in the cluster and of the transport agent
  std::string host = "127.0.0.1";
  int port = 0;        // KvStore gRPC service; 0: an ephemeral port
  int http_port = 0;   // /metrics and /health; 0: ephemeral, -1: no HTTP server
  int64_t capacity_bytes = 0;
  size_t block_bytes = 0;  // 0: adopt the first client's (see above)
  std::string policy = "lru";
  absl::Duration lease_timeout = absl::Seconds(30);
  std::string model_identity;  // reported to clients and the router; "" any model
  // The routers' Registries, as in WorkerOptions: host:port lists of routers and of names that
  // resolve to every router. Both "": standalone.
  std::string router_address;
  std::string router_service;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Tests only: every settle that releases leases (proto KvSettle) waits this long before it
  // takes effect, so a client whose releases race its next request finds the blocks still leased.
  absl::Duration release_delay_for_test = absl::ZeroDuration();
};

class KvStoreServer {
 public:
  // InvalidArgument for bad options (no capacity, unknown policy); the agent's error when the
  // pool's memory cannot be allocated.
  static absl::StatusOr<std::unique_ptr<KvStoreServer>> Create(const KvStoreServerOptions& options);
  virtual ~KvStoreServer() = default;  // Shutdown()

  // Binds the gRPC (and HTTP) ports, starts registering with the router. Unavailable if a port
  // is taken.
  [[nodiscard]] virtual absl::Status Start() = 0;
  // Deregisters, stops serving, frees the pool. Idempotent.
  virtual void Shutdown() = 0;

  virtual int port() const = 0;       // after Start()
  virtual int http_port() const = 0;  // after Start(); 0 without HTTP
  virtual std::string address() const = 0;  // host:port of the KvStore service
  virtual bool registered() const = 0;      // with the router (false when standalone)

  // Flips one byte of the block's stored copy (its checksum stays the old one). NotFound if
  // absent; FailedPrecondition before the pool exists.
  [[nodiscard]] virtual absl::Status CorruptBlockForTest(BlockHash hash) = 0;
};

}  // namespace strata::kvstore
