// TieredStore (see tiered_store.h): offload into G2, demotion G2 -> G3/G4 on a background
// thread, prefetch G3/G4 -> G2 on fetch threads, and one event stream for every tier.
#include "strata/kvstore/tiered_store.h"

#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/host_tier.h"
#include "strata/kvstore/remote_direct.h"
#include "tiered_store_internal.h"

namespace strata::kvstore {
namespace {

using internal::CostEstimator;
using internal::StoreMetrics;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class TieredStoreImpl final : public TieredStore {
 public:
  TieredStoreImpl(const TieredStoreOptions& options, std::unique_ptr<HostTier> host,
                  std::unique_ptr<Tier> disk, std::unique_ptr<Tier> remote);
  ~TieredStoreImpl() override;

  absl::Status Init();

  OffloadMode offload_mode() const override { return options_.offload; }
  size_t block_bytes() const override { return host_->block_bytes(); }
  Tier* tier(TierKind kind) override { return tiers_[static_cast<int>(kind)]; }

  absl::Status Offload(const BlockMeta& meta, std::span<const std::byte> data) override;
  absl::StatusOr<OffloadSlot> ReserveOffload(const BlockMeta& meta) override;
  absl::Status CommitOffload(uint64_t id) override { return host_->CommitLocalWrite(id); }
  void AbortOffload(uint64_t id) override { host_->AbortWrite(id); }
  std::span<std::byte> host_pool() const override {
    return {static_cast<std::byte*>(host_->pool_base()), host_->pool_bytes()};
  }
  void NoteUse(std::span<const BlockHash> hashes) override;
  std::vector<TierKind> Locate(std::span<const BlockHash> hashes) const override;
  void Prefetch(std::vector<BlockMeta> blocks, PrefetchDone done) override;
  absl::Status ReadHost(BlockHash hash, std::span<std::byte> dst) override;
  TierCost cost(TierKind kind) const override;
  void SetEventListener(TierEventListener listener) override;
  void Flush() override;

 private:
  struct Demotion {
    BlockMeta meta;
    std::unique_ptr<std::byte[]> data;  // block_bytes(), copied out of G2
    bool to_disk = false;
    bool to_remote = false;
  };
  struct FetchTask {
    std::vector<BlockMeta> blocks;
    PrefetchDone done;
  };
  // What FetchRemoteDirect got: `blocks` are in G2 and leased; `stop`: the run ends there.
  struct DirectFetch {
    int blocks = 0;
    bool stop = false;
  };

  void Emit(const TierEvent& event);
  bool OnHostEviction(const BlockMeta& meta, std::span<const std::byte> bytes, uint64_t checksum);
  void DemotionLoop();
  void Demote(const std::vector<Demotion>& batch);
  void FetchLoop();
  int RunFetch(const std::vector<BlockMeta>& blocks, std::vector<std::byte>& buffer,
               std::vector<uint64_t>& leases);
  DirectFetch FetchRemoteDirect(const std::vector<BlockMeta>& blocks, int first,
                                std::vector<uint64_t>& leases);
  Tier* SourceFor(BlockHash hash) const;
  void ObserveRun(TierKind kind, int blocks, double seconds);

  const TieredStoreOptions options_;
  const std::unique_ptr<HostTier> host_;
  const std::unique_ptr<Tier> disk_;
  const std::unique_ptr<Tier> remote_;
  // The remote tier's batch/direct interface, when it offers one; pool_registered_: the G2
  // pool is registered with it (Init), so G4 -> G2 fetches land in slots without a copy.
  DirectTransferTier* remote_direct_ = nullptr;
  bool pool_registered_ = false;
  std::array<Tier*, kNumTierKinds> tiers_{};
  std::unique_ptr<StoreMetrics> metrics_;

  absl::Mutex listener_mu_;
  TierEventListener listener_ ABSL_GUARDED_BY(listener_mu_);

  mutable absl::Mutex sketch_mu_;
  CountMinSketch sketch_ ABSL_GUARDED_BY(sketch_mu_);

  mutable absl::Mutex cost_mu_;
  std::array<CostEstimator, kNumTierKinds> costs_ ABSL_GUARDED_BY(cost_mu_);

  absl::Mutex demote_mu_;
  std::deque<Demotion> demotions_ ABSL_GUARDED_BY(demote_mu_);
  int demotions_in_flight_ ABSL_GUARDED_BY(demote_mu_) = 0;
  bool stop_demoting_ ABSL_GUARDED_BY(demote_mu_) = false;
  std::thread demoter_;

  absl::Mutex fetch_mu_;
  std::deque<FetchTask> fetches_ ABSL_GUARDED_BY(fetch_mu_);
  bool stop_fetching_ ABSL_GUARDED_BY(fetch_mu_) = false;
  std::vector<std::thread> fetchers_;
};

TieredStoreImpl::TieredStoreImpl(const TieredStoreOptions& options, std::unique_ptr<HostTier> host,
                                 std::unique_ptr<Tier> disk, std::unique_ptr<Tier> remote)
    : options_(options),
      host_(std::move(host)),
      disk_(std::move(disk)),
      remote_(std::move(remote)),
      sketch_(internal::UseSketchOptions(host_->usage().capacity_bytes /
                                         static_cast<int64_t>(host_->block_bytes()))),
      costs_{CostEstimator(internal::DefaultTierCost(TierKind::kDevice)),
             CostEstimator(internal::DefaultTierCost(TierKind::kHost)),
             CostEstimator(internal::DefaultTierCost(TierKind::kDisk)),
             CostEstimator(internal::DefaultTierCost(TierKind::kRemote))} {
  tiers_[static_cast<int>(TierKind::kHost)] = host_.get();
  tiers_[static_cast<int>(TierKind::kDisk)] = disk_.get();
  tiers_[static_cast<int>(TierKind::kRemote)] = remote_.get();
}

absl::Status TieredStoreImpl::Init() {
  std::array<const Tier*, kNumTierKinds> tiers;
  for (int k = 0; k < kNumTierKinds; ++k) tiers[k] = tiers_[k];
  STRATA_ASSIGN_OR_RETURN(metrics_,
                          StoreMetrics::Create(options_.metrics, options_.metrics_prefix, tiers));
  for (Tier* t : tiers_) {
    if (t != nullptr) t->SetEventListener([this](const TierEvent& e) { Emit(e); });
  }
  // G4 -> G2 fetches land in pool slots without a copy when the remote tier can take the pool
  // (the registration lives as long as the remote tier, which goes before the host tier).
  remote_direct_ = dynamic_cast<DirectTransferTier*>(remote_.get());
  if (remote_direct_ != nullptr) {
    absl::StatusOr<uint64_t> r =
        remote_direct_->RegisterRegion(host_->pool_base(), host_->pool_bytes());
    if (r.ok()) {
      pool_registered_ = true;
    } else {
      STRATA_LOG(Warning) << "tiered store: remote fetches go through staging: " << r.status();
    }
  }
  host_->SetEvictionHook(
      [this](const BlockMeta& meta, std::span<const std::byte> bytes, uint64_t checksum) {
        return OnHostEviction(meta, bytes, checksum);
      });
  demoter_ = std::thread([this] { DemotionLoop(); });
  for (int i = 0; i < std::max(1, options_.fetch_threads); ++i) {
    fetchers_.emplace_back([this] { FetchLoop(); });
  }
  return absl::OkStatus();
}

// Order matters: queued prefetches finish (they may evict from G2, feeding demotions), then no
// new demotions are accepted, the queued ones are written, and the metric callbacks (which read
// the tiers) go before the tiers do.
TieredStoreImpl::~TieredStoreImpl() {
  {
    absl::MutexLock lock(&fetch_mu_);
    stop_fetching_ = true;
  }
  for (std::thread& t : fetchers_) t.join();
  host_->SetEvictionHook(nullptr);
  {
    absl::MutexLock lock(&demote_mu_);
    stop_demoting_ = true;
  }
  if (demoter_.joinable()) demoter_.join();
  metrics_.reset();
  for (Tier* t : tiers_) {
    if (t != nullptr) t->SetEventListener(nullptr);
  }
}

// ---- offload, use counting, demotion ---------------------------------------------------------

absl::Status TieredStoreImpl::Offload(const BlockMeta& meta, std::span<const std::byte> data) {
  NoteUse({&meta.hash, 1});
  return host_->Put(meta, data);
}

absl::StatusOr<TieredStore::OffloadSlot> TieredStoreImpl::ReserveOffload(const BlockMeta& meta) {
  NoteUse({&meta.hash, 1});
  STRATA_ASSIGN_OR_RETURN(const HostTier::Reservation r, host_->ReserveWrite(meta));
  return OffloadSlot{.id = r.id, .bytes = host_pool().subspan(r.offset, host_->block_bytes())};
}

void TieredStoreImpl::NoteUse(std::span<const BlockHash> hashes) {
  absl::MutexLock lock(&sketch_mu_);
  for (BlockHash h : hashes) sketch_.Add(h);
}

// Runs inside HostTier's eviction path with its lock held: decide, copy, queue; never block.
// The copy verifies the bytes against the checksum G2 stored with them (the same pass): a block
// corrupted in G2's memory is dropped here (false: G2 counts it), not demoted under a checksum
// computed from the corrupt bytes, which G3 and G4 would then serve as intact.
bool TieredStoreImpl::OnHostEviction(const BlockMeta& meta, std::span<const std::byte> bytes,
                                     uint64_t checksum) {
  bool to_disk = false;
  if (disk_ != nullptr) {
    absl::MutexLock lock(&sketch_mu_);
    to_disk = sketch_.Estimate(meta.hash) >= options_.disk_admit_min_uses;
  }
  const bool to_remote = remote_ != nullptr && options_.demote_to_remote;
  if (!to_disk && !to_remote) return true;
  absl::MutexLock lock(&demote_mu_);
  if (demotions_.size() >= options_.max_pending_demotions) {
    metrics_->DemotionDropped();
    return true;
  }
  auto data = std::make_unique_for_overwrite<std::byte[]>(bytes.size());
  if (CopyWithBlockChecksum({data.get(), bytes.size()}, bytes) != checksum) return false;
  demotions_.push_back(
      Demotion{.meta = meta, .data = std::move(data), .to_disk = to_disk, .to_remote = to_remote});
  return true;
}

// Takes every queued demotion (up to kDemotionBatch) at once: the remote tier can store a
// batch in one round of RPCs (PutBlocks) instead of one per block.
void TieredStoreImpl::DemotionLoop() {
  constexpr size_t kDemotionBatch = 64;
  while (true) {
    std::vector<Demotion> batch;
    {
      absl::MutexLock lock(&demote_mu_);
      demote_mu_.Await(absl::Condition(
          +[](TieredStoreImpl* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->demote_mu_) {
            return !s->demotions_.empty() || s->stop_demoting_;
          },
          this));
      if (demotions_.empty()) return;  // stopping and drained
      while (!demotions_.empty() && batch.size() < kDemotionBatch) {
        batch.push_back(std::move(demotions_.front()));
        demotions_.pop_front();
      }
      demotions_in_flight_ += static_cast<int>(batch.size());
    }
    Demote(batch);
    absl::MutexLock lock(&demote_mu_);
    demotions_in_flight_ -= static_cast<int>(batch.size());
  }
}

void TieredStoreImpl::Demote(const std::vector<Demotion>& batch) {
  auto record = [this](Tier* tier, const BlockMeta& meta, const absl::Status& s) {
    if (s.ok()) {
      metrics_->Demoted(tier->kind());
    } else {
      STRATA_LOG(Debug) << "demotion of block " << meta.hash << " to " << TierName(tier->kind())
                        << " failed: " << s;
    }
  };
  std::vector<BlockMeta> metas;
  std::vector<const std::byte*> srcs;
  for (const Demotion& d : batch) {
    if (d.to_disk) record(disk_.get(), d.meta, disk_->Put(d.meta, {d.data.get(), block_bytes()}));
    if (d.to_remote) {
      metas.push_back(d.meta);
      srcs.push_back(d.data.get());
    }
  }
  if (metas.size() > 1 && remote_direct_ != nullptr) {
    const std::vector<absl::Status> r = remote_direct_->PutBlocks(metas, srcs);
    for (size_t i = 0; i < metas.size(); ++i) record(remote_.get(), metas[i], r[i]);
    return;
  }
  for (size_t i = 0; i < metas.size(); ++i) {
    record(remote_.get(), metas[i], remote_->Put(metas[i], {srcs[i], block_bytes()}));
  }
}

void TieredStoreImpl::Flush() {
  absl::MutexLock lock(&demote_mu_);
  demote_mu_.Await(absl::Condition(
      +[](TieredStoreImpl* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->demote_mu_) {
        return s->demotions_.empty() && s->demotions_in_flight_ == 0;
      },
      this));
}

// ---- lookup, prefetch, read ------------------------------------------------------------------

// G2 and G3 are asked block by block (local lookups). G4 is asked once, with CountPrefix over
// the rest of the chain from the first block neither local tier holds: a remote tier can answer
// that in one round trip.
std::vector<TierKind> TieredStoreImpl::Locate(std::span<const BlockHash> hashes) const {
  std::vector<TierKind> out;
  size_t remote_end = 0;  // remote holds [.., remote_end) once asked
  bool remote_asked = false;
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (host_->Contains(hashes[i])) {
      out.push_back(TierKind::kHost);
    } else if (disk_ != nullptr && disk_->Contains(hashes[i])) {
      out.push_back(TierKind::kDisk);
    } else {
      if (remote_ != nullptr && !remote_asked) {
        remote_asked = true;
        remote_end = i + static_cast<size_t>(remote_->CountPrefix(hashes.subspan(i)));
      }
      if (i >= remote_end) break;
      out.push_back(TierKind::kRemote);
    }
  }
  return out;
}

void TieredStoreImpl::Prefetch(std::vector<BlockMeta> blocks, PrefetchDone done) {
  absl::MutexLock lock(&fetch_mu_);
  fetches_.push_back(FetchTask{.blocks = std::move(blocks), .done = std::move(done)});
}

void TieredStoreImpl::FetchLoop() {
  std::vector<std::byte> buffer(host_->block_bytes());
  while (true) {
    FetchTask task;
    {
      absl::MutexLock lock(&fetch_mu_);
      fetch_mu_.Await(absl::Condition(
          +[](TieredStoreImpl* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->fetch_mu_) {
            return !s->fetches_.empty() || s->stop_fetching_;
          },
          this));
      if (fetches_.empty()) return;  // stopping and drained
      task = std::move(fetches_.front());
      fetches_.pop_front();
    }
    std::vector<uint64_t> leases;
    const int n = RunFetch(task.blocks, buffer, leases);
    HostTier* host = host_.get();
    PrefetchPins pins(nullptr, [host, leases = std::move(leases)](const void*) {
      for (uint64_t id : leases) host->Release(id);
    });
    if (task.done) task.done(n, std::move(pins));
  }
}

// G3 when it holds the block (a local lookup), else G4 (asked by Get itself: a remote Contains
// would be one more round trip).
Tier* TieredStoreImpl::SourceFor(BlockHash hash) const {
  if (disk_ != nullptr && disk_->Contains(hash)) return disk_.get();
  return remote_.get();
}

// Copies blocks into G2 in order until one cannot be had, leasing each block of the run that is
// in G2 (already or once copied) so that later copies cannot evict it. Consecutive blocks read
// from one tier form a run, timed (reads only) for that tier's cost and latency histogram.
int TieredStoreImpl::RunFetch(const std::vector<BlockMeta>& blocks, std::vector<std::byte>& buffer,
                              std::vector<uint64_t>& leases) {
  Tier* run_tier = nullptr;
  int run_blocks = 0;
  double run_seconds = 0;
  auto close_run = [&] {
    if (run_tier != nullptr && run_blocks > 0)
      ObserveRun(run_tier->kind(), run_blocks, run_seconds);
    run_tier = nullptr;
    run_blocks = 0;
    run_seconds = 0;
  };
  int n = 0;
  for (; n < static_cast<int>(blocks.size()); ++n) {
    const BlockMeta& meta = blocks[n];
    if (absl::StatusOr<uint64_t> held = host_->Pin(meta.hash); held.ok()) {
      close_run();
      leases.push_back(*held);
      continue;
    }
    Tier* source = SourceFor(meta.hash);
    if (source == nullptr) break;
    if (source == remote_.get() && pool_registered_) {
      close_run();
      const auto start = std::chrono::steady_clock::now();
      const DirectFetch f = FetchRemoteDirect(blocks, n, leases);
      if (f.blocks > 0) ObserveRun(TierKind::kRemote, f.blocks, SecondsSince(start));
      n += f.blocks;
      if (f.stop || f.blocks == 0) break;
      --n;  // the loop's ++n moves to the block after the fetched ones
      continue;
    }
    if (source != run_tier) close_run();
    run_tier = source;
    const auto start = std::chrono::steady_clock::now();
    if (!source->Get(meta.hash, buffer).ok()) break;
    run_seconds += SecondsSince(start);
    ++run_blocks;
    if (!host_->Put(meta, buffer).ok()) break;
    absl::StatusOr<uint64_t> held = host_->Pin(meta.hash);
    if (!held.ok()) break;  // evicted at once (every other slot leased): the run ends here
    leases.push_back(*held);
  }
  close_run();
  return n;
}

// G4 -> G2 without a copy: reserves G2 slots for the consecutive blocks from `first` that only
// G4 holds, has the remote tier read them straight into those slots (checksums verified there),
// commits them (CommitWrite checks the slot against the verified checksum) and leases them.
TieredStoreImpl::DirectFetch TieredStoreImpl::FetchRemoteDirect(
    const std::vector<BlockMeta>& blocks, int first, std::vector<uint64_t>& leases) {
  constexpr size_t kMaxBlocks = 256;  // slots held at once by one fetch
  std::vector<HostTier::Reservation> slots;
  std::vector<BlockHash> hashes;
  std::vector<std::byte*> dsts;
  auto* base = static_cast<std::byte*>(host_->pool_base());
  bool stop = false;
  for (size_t i = first; i < blocks.size() && slots.size() < kMaxBlocks; ++i) {
    if (i > size_t(first) && SourceFor(blocks[i].hash) != remote_.get()) break;
    absl::StatusOr<HostTier::Reservation> r = host_->ReserveWrite(blocks[i]);
    if (!r.ok()) {  // present now (the caller's loop leases it) or no room (the run ends)
      stop = !absl::IsAlreadyExists(r.status());
      break;
    }
    slots.push_back(*r);
    hashes.push_back(blocks[i].hash);
    dsts.push_back(base + r->offset);
  }
  if (slots.empty()) {
    if (stop) return {0, true};
    // blocks[first] arrived in G2 meanwhile: lease it as the caller's loop would.
    absl::StatusOr<uint64_t> held = host_->Pin(blocks[first].hash);
    if (!held.ok()) return {0, true};
    leases.push_back(*held);
    return {1, false};
  }
  std::vector<uint64_t> checksums(slots.size());
  absl::StatusOr<int> read = remote_direct_->GetInto(hashes, dsts, checksums);
  const int got = read.ok() ? *read : 0;
  int done = 0;
  for (; done < got; ++done) {
    if (!host_->CommitWrite(slots[done].id, checksums[done]).ok()) break;
    absl::StatusOr<uint64_t> held = host_->Pin(hashes[done]);
    if (!held.ok()) break;  // evicted at once (every other slot leased)
    leases.push_back(*held);
  }
  // The rest go back (a committed or failed reservation is already gone: a no-op).
  for (size_t k = done; k < slots.size(); ++k) host_->AbortWrite(slots[k].id);
  return {done, stop || done < static_cast<int>(slots.size())};
}

void TieredStoreImpl::ObserveRun(TierKind kind, int blocks, double seconds) {
  metrics_->ObserveFetch(kind, seconds);
  absl::MutexLock lock(&cost_mu_);
  costs_[static_cast<int>(kind)].Observe(
      static_cast<double>(blocks) * static_cast<double>(host_->block_bytes()), seconds);
}

absl::Status TieredStoreImpl::ReadHost(BlockHash hash, std::span<std::byte> dst) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = host_->Get(hash, dst);
  if (s.ok()) ObserveRun(TierKind::kHost, 1, SecondsSince(start));
  return s;
}

TierCost TieredStoreImpl::cost(TierKind kind) const {
  absl::MutexLock lock(&cost_mu_);
  return costs_[static_cast<int>(kind)].cost();
}

// ---- events ----------------------------------------------------------------------------------

void TieredStoreImpl::SetEventListener(TierEventListener listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = std::move(listener);
}

void TieredStoreImpl::Emit(const TierEvent& event) {
  absl::ReaderMutexLock lock(&listener_mu_);
  if (listener_) listener_(event);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(const TieredStoreOptions& options,
                                                                 std::unique_ptr<Tier> host,
                                                                 std::unique_ptr<Tier> disk,
                                                                 std::unique_ptr<Tier> remote) {
  if (host == nullptr) return absl::InvalidArgumentError("tiered store: a host tier is required");
  auto* host_tier = dynamic_cast<HostTier*>(host.get());
  if (host_tier == nullptr || host->kind() != TierKind::kHost) {
    return absl::InvalidArgumentError(
        "tiered store: the host tier must be a HostTier of kind host");
  }
  const std::pair<Tier*, TierKind> lower[] = {{disk.get(), TierKind::kDisk},
                                              {remote.get(), TierKind::kRemote}};
  for (auto [t, kind] : lower) {
    if (t == nullptr) continue;
    if (t->kind() != kind) {
      return absl::InvalidArgumentError(
          absl::StrCat("tiered store: the ", std::string(TierName(kind)), " tier reports kind ",
                       std::string(TierName(t->kind()))));
    }
    if (t->block_bytes() != host->block_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("tiered store: ", std::string(TierName(kind)),
                                                     " tier block_bytes ", t->block_bytes(),
                                                     " != host ", host->block_bytes()));
    }
  }
  if (options.disk_admit_min_uses < 1 || options.max_pending_demotions == 0) {
    return absl::InvalidArgumentError(
        "tiered store: disk_admit_min_uses and max_pending_demotions must be positive");
  }
  host.release();
  auto store = std::make_unique<TieredStoreImpl>(options, std::unique_ptr<HostTier>(host_tier),
                                                 std::move(disk), std::move(remote));
  STRATA_RETURN_IF_ERROR(store->Init());
  return store;
}

}  // namespace strata::kvstore
