#pragma once
// RemoteTier's implementation class, split over remote_tier.cc (setup, puts) and
// remote_tier_read.cc (gets, presence, stats).
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "strata/kvstore/remote_tier.h"
#include "strata/transport/agent.h"
#include "remote_daemon.h"
#include "remote_lanes.h"

namespace strata::kvstore::remote {

// Rendezvous placement over daemons given by their seeds (XXH3 of their address).
uint64_t DaemonSeed(const std::string& address);
int PickBySeeds(BlockHash hash, std::span<const uint64_t> seeds);

struct PutItem {
  BlockMeta meta;
  const std::byte* src = nullptr;
  int index = 0;  // in the caller's list (its slot in the per-block results)
};
struct GetItem {
  BlockHash hash = 0;
  std::byte* dst = nullptr;
  int index = 0;  // in the run
};
// How far a read got: `read` leading blocks verified; `why` it stopped (OK: it did not).
struct ReadResult {
  int read = 0;
  absl::Status why;
};

// A put piece copied into its lane, ready to transfer and commit.
struct StagedPut {
  std::vector<transport::Run> runs;
  std::vector<PutItem> written;  // the blocks behind `runs`, in order
  std::vector<OwedCommit> commits;  // one per written block
  int64_t full = 0;  // blocks the daemon had no room for
};

// A put piece between StartPiece and FinishPiece: reserved, staged and, when it has blocks to
// move, its transfer posted and not yet waited for.
struct PutInFlight {
  Daemon* daemon = nullptr;
  Session session;
  bool reserved = false;  // false: no reservation (its results are set and counted already)
  StagedPut staged;
  std::optional<LaneGuard> lane;     // a staged piece's lane, held until its transfer is done
  std::optional<uint64_t> transfer;  // the posted transfer
  absl::Status error;                // why it failed before a transfer was posted
};

// The pieces of one PutItems call that are started and not yet finished, oldest first (at most
// two), and what finishing the earlier ones found.
struct PutPipeline {
  std::deque<PutInFlight> started;
  std::span<absl::Status> results;  // per block, by PutItem::index
  absl::Status first;               // the first error, in piece order
};

// What the daemons report about themselves (remote_tier_read.cc).
struct DaemonTotals {
  TierUsage usage;
  int64_t evictions = 0;
};

struct Counters {
  std::atomic<int64_t> hits{0}, misses{0}, puts{0}, bytes_in{0}, bytes_out{0};
  std::atomic<int64_t> checksum_failures{0}, rejected{0};
  std::atomic<int64_t> direct_blocks{0}, staged_blocks{0};
};

// The daemons the tier places blocks on, as of one moment: an operation takes a snapshot when
// it starts and uses it throughout (a membership change meanwhile does not touch it; a daemon
// that left stays alive until the last operation holding it is done).
struct Membership {
  std::vector<std::shared_ptr<Daemon>> daemons;
  std::vector<uint64_t> seeds;  // DaemonSeed of each daemon's address
  int For(BlockHash hash) const { return PickBySeeds(hash, seeds); }
};

// A caller buffer registered with RegisterRegion.
struct RegisteredRegion {
  uint64_t region = 0;  // the agent's local region id (also the caller's handle)
  std::byte* base = nullptr;
  size_t bytes = 0;
};

// The local side of one transfer: a region of our agent and where its offset 0 is. Either a
// staging lane (base = staging buffer) or a registered caller region (direct).
struct LocalSide {
  uint64_t region = 0;
  const std::byte* base = nullptr;
  bool direct = false;
  uint64_t Offset(const std::byte* p) const { return static_cast<uint64_t>(p - base); }
};

class RemoteTierImpl final : public RemoteTier {
 public:
  explicit RemoteTierImpl(RemoteTierOptions options) : options_(std::move(options)) {}
  // Stops the flusher and flushes what is still owed, so a client that puts and goes away
  // leaves its blocks stored.
  ~RemoteTierImpl() override;

  absl::Status Init();

  TierKind kind() const override { return TierKind::kRemote; }
  size_t block_bytes() const override { return options_.block_bytes; }

  absl::Status Put(const BlockMeta& meta, std::span<const std::byte> data) override {
    return PutRun(std::span<const BlockMeta>(&meta, 1), data);
  }
  absl::Status Get(BlockHash hash, std::span<std::byte> dst) override;
  bool Contains(BlockHash hash) const override;
  int CountPrefix(std::span<const BlockHash> hashes) const override;
  absl::Status Erase(BlockHash hash) override;
  TierUsage usage() const override;
  TierStats stats() const override;
  void SetEventListener(TierEventListener listener) override { listener_ = std::move(listener); }

  absl::Status PutRun(std::span<const BlockMeta> metas, std::span<const std::byte> data) override;
  absl::StatusOr<int> GetRun(std::span<const BlockHash> hashes, std::span<std::byte> dst) override;
  absl::StatusOr<int> GetInto(std::span<const BlockHash> hashes, std::span<std::byte* const> dsts,
                              std::span<uint64_t> checksums) override;
  std::vector<absl::Status> PutBlocks(std::span<const BlockMeta> metas,
                                      std::span<const std::byte* const> srcs) override;
  int DaemonFor(BlockHash hash) const override { return Members()->For(hash); }
  std::vector<std::string> daemons() const override;
  void SetDaemons(std::vector<std::string> addresses) override ABSL_LOCKS_EXCLUDED(set_mu_);
  int connected_daemons() const override;
  void Flush() override;
  absl::StatusOr<uint64_t> RegisterRegion(void* addr, size_t bytes) override;
  absl::Status UnregisterRegion(uint64_t handle) override;
  RemotePathStats path_stats() const override {
    return {.direct_blocks = counters_.direct_blocks.load(),
            .staged_blocks = counters_.staged_blocks.load()};
  }

 private:
  // The registered region holding all of [p, p + n), if any.
  std::optional<RegisteredRegion> FindRegistered(const std::byte* p, size_t n) const
      ABSL_LOCKS_EXCLUDED(regions_mu_);
  // Blocks per request and transfer: a lane's worth through staging; when direct, no lane
  // bounds it, only the protocol's per-request limit.
  size_t PieceBlocks(bool direct) const;
  // Where one piece's blocks live on this side: the registered region when `direct`, else the
  // staging buffer, whose lane `*lane` holds (taking one first if it holds none; released when
  // it goes out of scope).
  LocalSide Local(const std::optional<RegisteredRegion>& direct,
                  std::optional<LaneGuard>* lane);
  // The registered region holding every one of `blocks` (a block each), if there is one.
  std::optional<RegisteredRegion> FindRegisteredBlocks(
      std::span<const std::byte* const> blocks) const;
  // Splits `items` by daemon and into pieces and pipelines them: a piece's transfer is on the
  // wire while the next one is reserved and staged. Sets results[item.index] for every item and
  // returns the first error (in piece order).
  absl::Status PutItems(std::span<const PutItem> items,
                        const std::optional<RegisteredRegion>& direct,
                        std::span<absl::Status> results);
  // Reserves and stages one piece and posts its transfer without waiting; appends it to
  // `pipe.started` (also when it failed: FinishPiece reports it in order).
  void StartPiece(PutPipeline& pipe, Daemon& d, std::span<const PutItem> items,
                  const std::optional<RegisteredRegion>& direct);
  // Waits for the oldest started piece's transfer and settles it: its commits (or, when the
  // transfer failed, its aborts) are owed, its results set; records its error in `pipe.first`.
  void FinishOldest(PutPipeline& pipe);
  absl::Status FinishPiece(PutInFlight& p, std::span<absl::Status> results);
  // A lane for the next staged piece of `pipe`. Waits only while the pipeline holds no lane
  // (a call never waits for a lane it holds itself), finishing its pieces first to free one.
  LaneGuard TakePutLane(PutPipeline& pipe);
  // Reserve, then once more for the blocks `d` refused if finishing the pipeline's started
  // pieces to `d` may free room (their commits or aborts ride on the second request, as they
  // rode on the next piece's only one before puts were pipelined).
  absl::StatusOr<v1::KvReserveWriteResponse> ReservePiece(PutPipeline& pipe, Daemon& d,
                                                          const Session& session,
                                                          std::span<const PutItem> items);
  absl::StatusOr<v1::KvReserveWriteResponse> Reserve(Daemon& d, const Session& session,
                                                     std::span<const PutItem> items);
  // Lists the transfer runs and commits of the blocks that got a slot; staged blocks are
  // copied into the lane first (copy and checksum in one pass), direct ones checksummed in place.
  StagedPut Stage(std::span<const PutItem> items, const v1::KvReserveWriteResponse& reserved,
                  const LocalSide& local, size_t lane_offset, std::span<absl::Status> results);
  // Counts (and publishes) the commits a daemon answered; `codes` empty: they were lost.
  void OnCommitsSettled(const std::string& address, std::span<const OwedCommit> commits,
                        std::span<const uint32_t> codes, const absl::Status& error) const;
  // Queues what a finished transfer leaves to settle with `d`, and wakes the flusher if idle.
  void Owe(Daemon& d, const Session& session, Owed owed) ABSL_LOCKS_EXCLUDED(flush_mu_);
  // The flusher thread: sends what a daemon has been owed for settle_delay with no request to
  // carry it.
  void FlushLoop() ABSL_LOCKS_EXCLUDED(flush_mu_);
  bool FlusherWanted() const ABSL_SHARED_LOCKS_REQUIRED(flush_mu_) {
    return kicked_ || stopping_;
  }
  // Reads block i into dsts[i]; `direct` when all of them lie in that registered region.
  ReadResult GetRunImpl(std::span<const BlockHash> hashes, std::span<std::byte* const> dsts,
                        const std::optional<RegisteredRegion>& direct,
                        std::span<uint64_t> checksums);
  // GetRunImpl for one contiguous buffer.
  ReadResult GetContiguous(std::span<const BlockHash> hashes, std::span<std::byte> dst);
  ReadResult GetPiece(Daemon& d, std::span<const GetItem> items,
                      const std::optional<RegisteredRegion>& direct, std::span<uint64_t> checksums);
  // Owes the daemon the release of every lease found in `leases`.
  void ReleaseLeases(Daemon& d, const Session& session, const v1::KvAcquireResponse& leases);
  ReadResult VerifyPiece(Daemon& d, const Session& session, const v1::KvAcquireResponse& leases,
                         std::span<const GetItem> items, int count, const std::byte* lane,
                         std::span<uint64_t> checksums);
  // One transfer between our `local_region` (a lane or a registered region) and the daemon's
  // pool, waited for.
  absl::Status Transfer(bool write, Daemon& d, const Session& session, uint64_t local_region,
                        const std::vector<transport::Run>& runs);
  // Transfer in two steps: posting it, and waiting for it (and releasing it). A failure at
  // either step drops `session`: the daemon, or our endpoint to it, is gone.
  absl::StatusOr<uint64_t> PostTransfer(bool write, Daemon& d, const Session& session,
                                        uint64_t local_region,
                                        const std::vector<transport::Run>& runs);
  absl::Status AwaitTransfer(Daemon& d, const Session& session, uint64_t transfer);
  void Publish(TierEvent::Kind kind, BlockHash hash, BlockHash parent) const {
    if (options_.publish_events && listener_) {
      listener_({.kind = kind, .tier = TierKind::kRemote, .hash = hash, .parent = parent});
    }
  }
  size_t bb() const { return options_.block_bytes; }
  static absl::Status NoDaemon() {
    return absl::UnavailableError("the remote tier knows no kvstore daemon");
  }
  DaemonTotals Totals() const ABSL_LOCKS_EXCLUDED(totals_mu_);
  // The current membership (never null).
  std::shared_ptr<const Membership> Members() const ABSL_LOCKS_EXCLUDED(members_mu_);
  std::shared_ptr<Daemon> NewDaemon(const std::string& address);

  const RemoteTierOptions options_;
  std::unique_ptr<transport::Agent> agent_;
  uint64_t staging_region_ = 0;
  std::byte* staging_ = nullptr;
  std::unique_ptr<remote::Lanes> lanes_;
  size_t lane_blocks_ = 1;
  absl::Mutex set_mu_;  // one membership change at a time
  mutable absl::Mutex members_mu_;
  std::shared_ptr<const Membership> members_ ABSL_GUARDED_BY(members_mu_);
  mutable Counters counters_;
  TierEventListener listener_;
  mutable absl::Mutex regions_mu_;
  std::vector<RegisteredRegion> registered_ ABSL_GUARDED_BY(regions_mu_);
  mutable absl::Mutex totals_mu_;
  mutable DaemonTotals totals_ ABSL_GUARDED_BY(totals_mu_);
  mutable absl::Time totals_at_ ABSL_GUARDED_BY(totals_mu_) = absl::InfinitePast();
  absl::Mutex flush_mu_;
  bool kicked_ ABSL_GUARDED_BY(flush_mu_) = false;  // something became owed while idle
  bool flusher_idle_ ABSL_GUARDED_BY(flush_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(flush_mu_) = false;
  std::thread flusher_;
};

}  // namespace strata::kvstore::remote
