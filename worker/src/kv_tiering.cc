#include "kv_tiering.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/block_hash.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/disk_tier.h"
#include "strata/kvstore/host_tier.h"
#include "strata/kvstore/remote_tier.h"

namespace strata::worker {
namespace {

v1::KvEvent ToProto(const kvstore::TierEvent& e) {
  v1::KvEvent out;
  out.set_kind(e.kind == kvstore::TierEvent::Kind::kStored ? v1::KvEvent::STORED
                                                           : v1::KvEvent::REMOVED);
  out.set_hash(e.hash);
  out.set_parent_hash(e.parent);
  out.set_tier(static_cast<uint32_t>(e.tier));
  return out;
}

}  // namespace

KvTiering::KvTiering(const KvTieringOptions& options, std::unique_ptr<kvstore::TieredStore> store,
                     EngineLoop* loop)
    : options_(options), store_(std::move(store)), loop_(loop) {
  const Engine& e = loop_->engine_for_config();
  block_size_ = e.block_manager().block_size();
  hasher_ = e.block_hasher();
}

namespace {

// When the engine hands a block to the store: on commit (write-through) or on eviction.
Engine::OffloadOn OffloadPoint(const kvstore::TieredStore& store) {
  return store.offload_mode() == kvstore::OffloadMode::kWriteThrough ? Engine::OffloadOn::kCommit
                                                                     : Engine::OffloadOn::kEvict;
}

}  // namespace

KvTiering::~KvTiering() {
  if (applier_.joinable()) {
    {
      absl::MutexLock lock(&discovery_mu_);
      stopping_ = true;
    }
    applier_.join();
  }
  // Pending offloads are handed to the store (it is still here) and the engine gives up the
  // pool's registration before the pool goes; on the calling thread once the loop is stopped.
  if (store_ == nullptr) return;
  const Engine::OffloadOn on = OffloadPoint(*store_);
  loop_->RunOnEngine([on](Engine& e) { e.SetBlockOffload(on, nullptr); });
  // The store's threads (demotions to the disk tier) report to OnTierEvent until the store is
  // gone, so it goes now, before the members that method uses: declared after store_, they
  // would otherwise be destroyed first.
  store_.reset();
}

absl::StatusOr<std::unique_ptr<KvTiering>> KvTiering::Build(const KvTierOptions& t,
                                                            const std::string& worker_id,
                                                            EngineLoop* loop,
                                                            metrics::Registry* registry) {
  const size_t block_bytes = loop->engine_for_config().kv_block_bytes();
  kvstore::HostTierOptions ho;
  ho.block_bytes = block_bytes;
  ho.capacity_bytes = t.host_bytes;
  ho.policy = t.host_policy;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<kvstore::HostTier> host, kvstore::HostTier::Create(ho));
  if (!host->pinned()) {
    STRATA_LOG(Warning) << "the host KV tier could not be page-locked (RLIMIT_MEMLOCK?); "
                           "serving from unlocked memory";
  }
  std::unique_ptr<kvstore::Tier> disk, remote;
  if (t.disk_bytes > 0) {
    kvstore::DiskTierOptions d;
    d.path = t.disk_path;
    d.block_bytes = block_bytes;
    d.capacity_bytes = t.disk_bytes;
    d.policy = t.disk_policy;
    STRATA_ASSIGN_OR_RETURN(disk, kvstore::DiskTier::Create(d));
  }
  if (!t.remote.empty() && t.remote_from_router) {
    return absl::InvalidArgumentError(
        "G4's kvstore daemons come either from a list or from the router, not both");
  }
  if (!t.remote.empty() || t.remote_from_router) {
    kvstore::RemoteTierOptions r;
    r.daemons = t.remote;  // none yet when they come from the router
    r.block_bytes = block_bytes;
    r.agent_name = absl::StrCat(worker_id, "-kv");
    STRATA_ASSIGN_OR_RETURN(remote, kvstore::RemoteTier::Create(r));
  }
  kvstore::TieredStoreOptions so;
  STRATA_ASSIGN_OR_RETURN(so.offload, kvstore::ParseOffloadMode(t.offload));
  so.disk_admit_min_uses = t.disk_admit_uses;
  so.demote_to_remote = t.demote_to_remote;
  so.metrics = registry;
  STRATA_ASSIGN_OR_RETURN(auto store, kvstore::TieredStore::Create(
                                          so, std::move(host), std::move(disk), std::move(remote)));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<KvTiering> tiering,
                          Create(KvTieringOptions{}, std::move(store), loop, registry));
  if (t.remote_from_router) {
    {
      absl::MutexLock lock(&tiering->discovery_mu_);
      tiering->discovery_.emplace(t.remote_grace);
    }
    KvTiering* self = tiering.get();
    tiering->applier_ = std::thread([self] { self->ApplyMembership(); });
  }
  return tiering;
}

bool KvTiering::discovers_kvstores() const {
  absl::MutexLock lock(&discovery_mu_);
  return remote_ != nullptr && discovery_.has_value();
}

void KvTiering::OnKvstoresListed(const std::vector<std::string>& listed) {
  absl::MutexLock lock(&discovery_mu_);
  if (remote_ == nullptr || !discovery_) return;
  std::optional<std::vector<std::string>> use = discovery_->Update(listed, absl::Now());
  if (!use) return;
  STRATA_LOG(Info) << "G4 kvstore daemons from the router: "
                   << (use->empty() ? "none" : absl::StrJoin(*use, ", "));
  pending_ = std::move(use);  // replaces one not applied yet: only the latest matters
}

// Connecting to a daemon that joined (a Hello) or flushing one that left (a Settle) can take
// an RPC deadline when the daemon is gone; the registry client's thread, which reports the
// list, must not wait for that or the worker would miss its own heartbeats.
void KvTiering::ApplyMembership() {
  for (;;) {
    std::vector<std::string> daemons;
    {
      absl::MutexLock lock(&discovery_mu_);
      discovery_mu_.Await(absl::Condition(
          +[](KvTiering* t)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return t->stopping_ || t->pending_.has_value(); },
          this));
      if (stopping_) return;
      daemons = std::move(*pending_);
      pending_.reset();
    }
    remote_->SetDaemons(std::move(daemons));
    absl::MutexLock lock(&discovery_mu_);
    ++applied_;
  }
}

int64_t KvTiering::membership_changes_applied() const {
  absl::MutexLock lock(&discovery_mu_);
  return applied_;
}

absl::StatusOr<std::unique_ptr<KvTiering>> KvTiering::Create(
    const KvTieringOptions& options, std::unique_ptr<kvstore::TieredStore> store, EngineLoop* loop,
    metrics::Registry* registry) {
  const size_t block_bytes = loop->engine_for_config().kv_block_bytes();
  if (store->block_bytes() != block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("KV tiers hold ", store->block_bytes(),
                                                   "-byte blocks but the engine's are ",
                                                   block_bytes, " bytes"));
  }
  std::unique_ptr<KvTiering> t(new KvTiering(options, std::move(store), loop));
  t->Install(registry);
  return t;
}

void KvTiering::Install(metrics::Registry* registry) {
  store_->SetEventListener([this](const kvstore::TierEvent& e) { OnTierEvent(e); });
  loop_->SetKvEventObserver([this](const KvCacheEvent& e) {
    absl::MutexLock lock(&mu_);
    if (e.kind == KvCacheEvent::Kind::kStored) {
      device_.insert(e.hash);
    } else {
      device_.erase(e.hash);
    }
  });
  kvstore::TieredStore* store = store_.get();
  const Engine::OffloadOn on = OffloadPoint(*store_);
  // Offloaded blocks are copied from the device straight into reserved G2 slots (the pool is
  // registered with the backend for that); the staged path (a copy through the engine's ring)
  // is the fallback where registering fails.
  loop_->Post([store, on](Engine& e) {
    Engine::BlockOffloadTarget target;
    target.reserve = [store](BlockHash hash,
                             BlockHash parent) -> absl::StatusOr<Engine::BlockOffloadSlot> {
      STRATA_ASSIGN_OR_RETURN(kvstore::TieredStore::OffloadSlot slot,
                              store->ReserveOffload({.hash = hash, .parent = parent}));
      return Engine::BlockOffloadSlot{.id = slot.id, .bytes = slot.bytes};
    };
    target.finish = [store](uint64_t id, bool copied) {
      if (!copied) return store->AbortOffload(id);
      const absl::Status s = store->CommitOffload(id);
      if (!s.ok()) {
        STRATA_LOG(Warning) << "KV offload to host tier failed: " << s;
      }
    };
    const absl::Status s = e.SetBlockOffloadTarget(on, std::move(target), store->host_pool());
    if (s.ok()) return;
    STRATA_LOG(Warning) << "KV offload: the host tier's pool cannot take device copies directly ("
                        << s << "); staging them instead";
    e.SetBlockOffload(on,
                      [store](BlockHash hash, BlockHash parent, std::span<const std::byte> data) {
                        absl::Status s = store->Offload({.hash = hash, .parent = parent}, data);
                        if (!s.ok() && !absl::IsResourceExhausted(s)) {
                          STRATA_LOG(Warning) << "KV offload to host tier failed: " << s;
                        }
                      });
  });
  loop_->SetPromptStager(this);
  remote_ = dynamic_cast<kvstore::RemoteTier*>(store_->tier(kvstore::TierKind::kRemote));
  if (registry == nullptr) return;
  if (remote_ != nullptr) {
    auto& daemons = registry->GaugeOrDie(
        "strata_worker_kv_remote_daemons",
        "kvstore daemons the remote tier (G4) places blocks on (known), and how many of them it "
        "is connected to (connected)",
        {"state"});
    callbacks_.push_back(
        daemons.AddCallback({"known"}, [this] { return double(remote_->daemons().size()); }));
    callbacks_.push_back(daemons.AddCallback(
        {"connected"}, [this] { return double(remote_->connected_daemons()); }));
  }
  auto& counter = registry->CounterOrDie(
      "strata_worker_kv_stage_total",
      "Prompts staged against the lower KV tiers, by outcome: none (nothing cached below the "
      "device), fetch (a run was fetched), recompute (fetching was predicted slower)",
      {"outcome"});
  auto& imported = registry->CounterOrDie(
      "strata_worker_kv_imported_blocks_total",
      "KV blocks brought from the lower tiers into the engine's prefix cache");
  for (const char* outcome : {"none", "fetch", "recompute"}) {
    callbacks_.push_back(counter.AddCallback({outcome}, [this, outcome] {
      Stats s = stats();
      if (outcome[0] == 'f') return double(s.fetch_runs);
      if (outcome[0] == 'r') return double(s.recompute_runs);
      return double(s.staged - s.fetch_runs - s.recompute_runs);
    }));
  }
  callbacks_.push_back(
      imported.AddCallback({}, [this] { return double(stats().imported_blocks); }));
  auto& failed = registry->CounterOrDie(
      "strata_worker_kv_fetch_failed_blocks_total",
      "KV blocks a staged fetch planned but could not bring into the engine (missing from the "
      "tier when read, or no room), so they were recomputed");
  callbacks_.push_back(
      failed.AddCallback({}, [this] { return double(stats().fetch_failed_blocks); }));
}

void KvTiering::OnTierEvent(const kvstore::TierEvent& e) {
  absl::MutexLock lock(&mu_);
  events_.push_back(ToProto(e));
}

std::vector<v1::KvEvent> KvTiering::TakeEvents() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::KvEvent> out;
  out.swap(events_);
  return out;
}

void KvTiering::Resync() {
  std::vector<v1::KvEvent> all;
  for (kvstore::TierKind kind : {kvstore::TierKind::kHost, kvstore::TierKind::kDisk}) {
    kvstore::Tier* tier = store_->tier(kind);
    if (tier == nullptr) continue;
    v1::KvEvent cleared = ToProto({.kind = kvstore::TierEvent::Kind::kStored, .tier = kind});
    cleared.set_kind(v1::KvEvent::CLEARED);
    all.push_back(std::move(cleared));
    for (const kvstore::BlockMeta& m : tier->Contents()) {
      all.push_back(ToProto({.kind = kvstore::TierEvent::Kind::kStored,
                             .tier = kind,
                             .hash = m.hash,
                             .parent = m.parent}));
    }
  }
  absl::MutexLock lock(&mu_);
  events_ = std::move(all);
}

KvTiering::Stats KvTiering::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int KvTiering::LeadingInDevice(std::span<const BlockHash> hashes) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  while (n < static_cast<int>(hashes.size()) && device_.contains(hashes[n])) ++n;
  return n;
}

void KvTiering::Stage(std::span<const int32_t> prompt, std::string_view cache_salt,
                      std::function<void(EngineTask)> ready) {
  std::vector<BlockHash> hashes = hasher_.Salted(cache_salt).Chain(prompt, block_size_);
  const int device = LeadingInDevice(hashes);
  store_->NoteUse(std::span<const BlockHash>(hashes.data(), size_t(device)));
  const std::span<const BlockHash> rest(hashes.data() + device, hashes.size() - device);
  const std::vector<kvstore::TierKind> located =
      rest.empty() ? std::vector<kvstore::TierKind>{} : store_->Locate(rest);
  const int plan = located.empty()
                       ? 0
                       : kvstore::PlanFetch(options_.fetch, *store_, located, block_size_,
                                            loop_->load().prefill_tokens_per_second);
  {
    absl::MutexLock lock(&mu_);
    ++stats_.staged;
    if (!located.empty()) ++(plan > 0 ? stats_.fetch_runs : stats_.recompute_runs);
  }
  if (plan == 0) {
    ready(nullptr);
    return;
  }
  store_->NoteUse(rest.subspan(0, size_t(plan)));
  // Even a run wholly in G2 goes through Prefetch, which pins it there until the import: the
  // import's own device allocations write evicted G1 blocks back into G2, which would otherwise
  // evict the run's unpinned blocks before they are read.
  std::vector<kvstore::BlockMeta> run;
  run.reserve(plan);
  for (int i = 0; i < plan; ++i) {
    const size_t idx = size_t(device + i);
    run.push_back({.hash = hashes[idx], .parent = idx == 0 ? kRootBlockHash : hashes[idx - 1]});
  }
  auto shared = std::make_shared<std::vector<BlockHash>>(std::move(hashes));
  store_->Prefetch(std::move(run), [this, shared, device, plan, ready = std::move(ready)](
                                       int n, kvstore::TieredStore::PrefetchPins pins) mutable {
    if (n < plan) {
      absl::MutexLock lock(&mu_);
      stats_.fetch_failed_blocks += plan - n;
    }
    ready(n > 0 ? ImportTask(std::move(*shared), device, n, std::move(pins)) : nullptr);
  });
}

EngineTask KvTiering::ImportTask(std::vector<BlockHash> hashes, int device_blocks, int fetched,
                                 kvstore::TieredStore::PrefetchPins pins) {
  // `pins` keeps a prefetched run resident in G2 until this task has read it (or is dropped).
  return [this, hashes = std::move(hashes), device_blocks, fetched,
          pins = std::move(pins)](Engine& e) {
    std::vector<Engine::ImportedBlock> blocks;
    blocks.reserve(fetched);
    for (int i = 0; i < fetched; ++i) {
      const size_t idx = size_t(device_blocks + i);
      blocks.push_back(
          {.hash = hashes[idx], .parent = idx == 0 ? kRootBlockHash : hashes[idx - 1]});
    }
    const std::span<const BlockHash> keep(hashes.data(), size_t(device_blocks));
    const int n = e.ImportCachedBlocks(keep, blocks, [&](size_t i, std::span<std::byte> dst) {
      return store_->ReadHost(blocks[i].hash, dst);
    });
    absl::MutexLock lock(&mu_);
    stats_.imported_blocks += n;
    stats_.fetch_failed_blocks += fetched - n;
  };
}

}  // namespace strata::worker
