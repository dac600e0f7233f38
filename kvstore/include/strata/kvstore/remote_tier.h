#pragma once
// G4: blocks held by `strata kvstore` daemons (kvstore_server.h), reached over gRPC for metadata
// (proto/kvstore.proto) and the transport (UCX RMA) for the bytes.
//
//   Put  ReserveWrite -> copy + checksum into a registered staging buffer -> PostWrite -> Wait;
//        the commit (reservation id + checksum) is owed to the daemon
//   Get  Acquire -> PostRead into staging -> Wait; the lease release is owed -> verify checksum
//        -> copy out
//
// One round trip per operation: what is owed rides on this tier's next ReserveWrite or Acquire
// to that daemon, which applies it first (proto/kvstore.proto, KvSettle); any other request
// there (Lookup, Erase, Stats) flushes it first. So a thread's later requests always see its
// finished puts and find its finished reads' slots released (a request of another thread that
// carries them concurrently may still be in flight: then a miss or a full pool, never wrong data).
// When no request follows within `settle_delay`, a background thread sends it alone (one Settle
// RPC, off the caller's path); Flush() sends it at once, and destruction flushes. Until then a put
// is not visible to other clients, and a read slot stays leased (never past the daemon's lease
// timeout: a crashed client's reservations and leases expire there). The daemon trusts a commit's
// checksum (the writer computed it once, from the bytes it wrote) and never reads the slot back;
// every reader verifies.
//
// Registered memory: a caller whose buffers live long (the G2 host pool, an engine's staging
// memory) registers them once with RegisterRegion. A Put/Get/PutRun/GetRun whose whole buffer
// lies inside one registered region skips the staging buffer: the transfer moves the blocks
// straight between that memory and the daemon's pool (Put checksums the caller's blocks in
// place; Get verifies them in place). Any other buffer goes through staging as above. The
// registration calls, GetInto (scattered destinations) and PutBlocks (scattered sources, one
// round of RPCs for a batch) are in remote_direct.h.
//
// Placement: each block lives on exactly one daemon, chosen by rendezvous (highest-random-weight)
// hashing of the block hash over the daemon addresses, so every client that lists the same
// daemons (by the same address strings) agrees where a block lives without asking anyone, and
// removing a daemon moves only its own blocks.
//
// Membership: the daemons are options.daemons at first and may be replaced at run time with
// SetDaemons (a worker that discovers them from the router's registry does so on every
// heartbeat). A daemon that joins takes over the blocks that now hash to it (until they are
// written again there, reads of them miss); one that leaves is flushed (what is owed to it is
// sent) and forgotten, and its blocks are no longer read. An operation already under way
// finishes on the daemons it started with (a transfer to one that left may then fail: a miss,
// or a rejected put, never wrong data). With no daemon at all, puts are rejected with
// Unavailable and reads miss.
//
// Presence (Contains, CountPrefix) is always asked of the daemons: nothing is cached, so an
// answer is never staler than one round trip.
//
// Failures: a daemon that cannot be reached makes the operations on its blocks fail with
// Unavailable (a Put counts as rejected, a Get as a miss; Contains answers false). The tier
// reconnects by itself (a new Hello, AddPeer and ImportRegion) on a later operation once the
// daemon answers again, at most once per `reconnect_interval`; a daemon that restarted is noticed
// by its new instance id, so offsets and keys of its previous incarnation are never used.
//
// Events: the daemons are the source of truth for what G4 holds and report it to the router
// themselves (as ROLE_KVSTORE, tier 3). With publish_events, this tier also reports kStored for
// its own puts (when the daemon confirms the commit) and kRemoved for blocks it erased or found
// corrupt. stats().puts counts confirmed commits; a commit the daemon refuses (its reservation
// expired) or never receives (it restarted) counts as rejected.
//
// Thread-safety: every method is thread-safe; up to `lanes` transfers run concurrently.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/kvstore/remote_direct.h"
#include "strata/kvstore/tier.h"

namespace strata::kvstore {

struct RemoteTierOptions {
  // host:port of each daemon's KvStore service; may be empty when SetDaemons supplies them later
  std::vector<std::string> daemons;
  size_t block_bytes = 0;
  std::string agent_name = "kv-client";  // this client's transport agent name (unique per process)
  absl::Duration rpc_timeout = absl::Seconds(2);
  absl::Duration transfer_timeout = absl::Seconds(5);
  absl::Duration reconnect_interval = absl::Milliseconds(200);
  // Registered staging memory, split into `lanes` independent buffers of whole blocks (at least
  // one block each); a run longer than a lane moves in several transfers.
  size_t staging_bytes = 64 << 20;
  int lanes = 4;
  // How long owed commits and releases wait for a request to carry them before a background
  // thread sends them alone (see above).
  absl::Duration settle_delay = absl::Milliseconds(2);
  bool publish_events = false;
};

// How blocks moved (monotonic): straight from/to registered caller memory, or through staging.
struct RemotePathStats {
  int64_t direct_blocks = 0;  // blocks transferred to/from a RegisterRegion'd buffer
  int64_t staged_blocks = 0;  // blocks copied through the staging buffer
};

class RemoteTier : public Tier, public DirectTransferTier {
 public:
  // Creates the transport agent and the staging buffer and tries to connect to every daemon; a
  // daemon that is down now is retried later (not an error). InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<RemoteTier>> Create(const RemoteTierOptions& options);

  // Stores a chain run: `data` holds metas.size() blocks back to back. One ReserveWrite and one
  // transfer per daemon and piece (a lane's worth of blocks through staging; up to
  // kMaxKvBlocksPerRequest from registered memory); the commit is owed (see above). The pieces
  // are pipelined: a piece's transfer is posted, the next piece reserved and staged, and only
  // then is the first waited for (at most two transfers of a call at once; a staged piece holds
  // its lane until its transfer is done, and a call waits for a lane only while it holds none).
  // Blocks already present are skipped. The first error (in piece order) is returned after
  // every block was attempted; OK means every block is present or its bytes are in its slot
  // with the commit owed.
  [[nodiscard]] virtual absl::Status PutRun(std::span<const BlockMeta> metas,
                                            std::span<const std::byte> data) = 0;
  // Reads a chain run into `dst` (hashes.size() blocks back to back). Returns how many leading
  // blocks were read and verified: it stops at the first miss (an absent block, or a corrupt one,
  // which is erased and counted as a checksum failure). An error (Unavailable, ...) is returned
  // only when it kept even the first block from being read.
  [[nodiscard]] virtual absl::StatusOr<int> GetRun(std::span<const BlockHash> hashes,
                                                   std::span<std::byte> dst) = 0;

  // The daemon that holds (or would hold) `hash`: an index into daemons(); -1 with none.
  virtual int DaemonFor(BlockHash hash) const = 0;
  // The current daemons' addresses, in the order given.
  virtual std::vector<std::string> daemons() const = 0;
  // Replaces the daemons (see "Membership" above). Duplicates are dropped; the addresses kept
  // from the current list keep their connections. Daemons that join are connected to now (one
  // that is down is retried later); ones that leave are flushed first. Blocks until done.
  virtual void SetDaemons(std::vector<std::string> addresses) = 0;
  // Daemons connected right now (Hello done, region imported).
  virtual int connected_daemons() const = 0;
  virtual RemotePathStats path_stats() const = 0;
  // Sends what this tier still owes the daemons (commits of finished puts, releases of finished
  // reads) and waits for the answers: afterwards every put that returned OK is visible to every
  // client (or counted as rejected) and no finished read holds a lease.
  virtual void Flush() = 0;
};

// Rendezvous placement, exposed for tests and tools: the index of the daemon whose
// XXH3(hash, seed = XXH3(daemons[i])) is highest. -1 for an empty list.
int RendezvousPick(BlockHash hash, std::span<const std::string> daemons);

}  // namespace strata::kvstore
