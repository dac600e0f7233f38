#pragma once
// RemoteTier's implementation class, split over remote_tier.cc (setup, puts) and
// remote_tier_read.cc (gets, presence, stats).
#include <atomic>
#include <memory>
#include <span>
#include <string>
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
  v1::KvCommitWriteRequest commit;
  int64_t full = 0;  // blocks the daemon had no room for
};

// What the daemons report about themselves (remote_tier_read.cc).
struct DaemonTotals {
  TierUsage usage;
  int64_t evictions = 0;
};

struct Counters {
  std::atomic<int64_t> hits{0}, misses{0}, puts{0}, bytes_in{0}, bytes_out{0};
  std::atomic<int64_t> checksum_failures{0}, rejected{0};
};

class RemoteTierImpl final : public RemoteTier {
 public:
  explicit RemoteTierImpl(RemoteTierOptions options) : options_(std::move(options)) {}

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
  int DaemonFor(BlockHash hash) const override { return PickBySeeds(hash, seeds_); }
  int connected_daemons() const override;

 private:
  absl::Status PutPiece(Daemon& d, std::span<const PutItem> items);
  absl::StatusOr<v1::KvReserveWriteResponse> Reserve(Daemon& d, const Session& session,
                                                     std::span<const PutItem> items);
  StagedPut Stage(std::span<const PutItem> items, const v1::KvReserveWriteResponse& reserved,
                  size_t lane_offset);
  absl::Status CommitPiece(Daemon& d, const Session& session, v1::KvCommitWriteRequest commit,
                           std::span<const PutItem> written);
  ReadResult GetRunImpl(std::span<const BlockHash> hashes, std::span<std::byte> dst);
  ReadResult GetPiece(Daemon& d, std::span<const GetItem> items);
  void ReleaseLeases(Daemon& d, const Session& session, const v1::KvAcquireResponse& leases);
  ReadResult VerifyPiece(Daemon& d, const Session& session, const v1::KvAcquireResponse& leases,
                         std::span<const GetItem> items, int count, const std::byte* lane);
  // One transfer between a lane and the daemon's pool, waited for.
  absl::Status Transfer(bool write, Daemon& d, const Session& session,
                        const std::vector<transport::Run>& runs);
  void Publish(TierEvent::Kind kind, BlockHash hash, BlockHash parent) const {
    if (options_.publish_events && listener_) {
      listener_({.kind = kind, .tier = TierKind::kRemote, .hash = hash, .parent = parent});
    }
  }
  size_t bb() const { return options_.block_bytes; }
  DaemonTotals Totals() const ABSL_LOCKS_EXCLUDED(totals_mu_);

  const RemoteTierOptions options_;
  std::unique_ptr<transport::Agent> agent_;
  uint64_t staging_region_ = 0;
  std::byte* staging_ = nullptr;
  std::unique_ptr<remote::Lanes> lanes_;
  size_t lane_blocks_ = 1;
  std::vector<uint64_t> seeds_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
  mutable Counters counters_;
  TierEventListener listener_;
  mutable absl::Mutex totals_mu_;
  mutable DaemonTotals totals_ ABSL_GUARDED_BY(totals_mu_);
  mutable absl::Time totals_at_ ABSL_GUARDED_BY(totals_mu_) = absl::InfinitePast();
};

}  // namespace strata::kvstore::remote
