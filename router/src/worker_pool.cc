#include "strata/router/worker_pool.h"

#include <algorithm>
#include <array>
#include <chrono>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"

namespace strata::router {

namespace {
// Seconds on a steady clock: the deadlines of provisional index entries.
double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

WorkerRole RoleFromProto(v1::Role role) {
  switch (role) {
    case v1::ROLE_PREFILL:
      return WorkerRole::kPrefill;
    case v1::ROLE_DECODE:
      return WorkerRole::kDecode;
    case v1::ROLE_MIXED:
      return WorkerRole::kMixed;
    case v1::ROLE_KVSTORE:
      return WorkerRole::kKvstore;
    default:
      return WorkerRole::kUnspecified;
  }
}

LoadReport LoadFromProto(const v1::WorkerLoad& load) {
  LoadReport out;
  out.queued_prefill_tokens = load.queued_prefill_tokens();
  out.running = load.running();
  out.waiting = load.waiting();
  out.free_kv_blocks = load.free_kv_blocks();
  out.total_kv_blocks = load.total_kv_blocks();
  out.step_seconds_ema = load.step_seconds_ema();
  out.decode_context_tokens = load.decode_context_tokens();
  out.prefill_tokens_per_second = load.prefill_tokens_per_second();
  out.stalled = load.stalled();
  out.stalled_seconds = load.stalled_seconds();
  return out;
}

WorkerPool::WorkerPool(absl::Duration dead_after, std::shared_ptr<const BlockHashKey> kv_hash_key)
    : dead_after_(dead_after),
      kv_hash_key_(std::move(kv_hash_key)),
      epoch_(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {
  pools_[""];
}

absl::Status WorkerPool::ServeModels(const std::vector<std::string>& names) {
  std::map<std::string, Pool, std::less<>> pools;
  for (const std::string& name : names) {
    if (name.empty()) return absl::InvalidArgumentError("a served model needs a name");
    if (!pools.try_emplace(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("model ", name, " is served twice"));
    }
  }
  if (pools.empty()) pools[""];
  absl::MutexLock lock(&mu_);
  if (!workers_.empty()) {
    return absl::FailedPreconditionError("served models are set before workers register");
  }
  pools_ = std::move(pools);
  return absl::OkStatus();
}

void WorkerPool::RequireProfiles(std::vector<WorkerProfile> profiles, const std::string& model) {
  auto shared = std::make_shared<const std::vector<WorkerProfile>>(std::move(profiles));
  absl::MutexLock lock(&mu_);
  if (model.empty()) {
    default_profiles_ = std::move(shared);
  } else if (auto it = pools_.find(model); it != pools_.end()) {
    it->second.profiles = std::move(shared);
  } else if (pools_.size() == 1) {
    pools_.begin()->second.profiles = std::move(shared);
  }
}

const WorkerPool::Pool* WorkerPool::FindPool(std::string_view model) const {
  if (pools_.size() == 1) return &pools_.begin()->second;
  auto it = pools_.find(model);
  return it == pools_.end() ? nullptr : &it->second;
}

WorkerPool::Pool* WorkerPool::FindPool(std::string_view model) {
  return const_cast<Pool*>(std::as_const(*this).FindPool(model));
}

absl::Status WorkerPool::CheckWorker(const v1::WorkerInfo& info, const Pool& pool,
                                     std::shared_ptr<const WorkerProfile>* profile) const {
  if (!pool.model_identity.empty() && info.model_identity() != pool.model_identity) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", info.id(), " serves a different model (identity ",
                     info.model_identity(), ", its pool's ", pool.model_identity, ")"));
  }
  const std::string key_fp = KeyFingerprint(kv_hash_key_.get());
  if (info.kv_hash_key_fingerprint() != key_fp) {
    auto name = [](const std::string& fp) { return fp.empty() ? std::string("none") : fp; };
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", info.id(), " keys its block hashes with another KV hash key than the router's",
        " (key fingerprint ", name(info.kv_hash_key_fingerprint()), ", router ", name(key_fp),
        "): give the router and every worker the same --kv-hash-key-file"));
  }
  if (pool.block_size != 0 && info.block_size() != pool.block_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", info.id(), " uses block size ", info.block_size(), ", its pool ",
        pool.block_size));
  }
  // Prefill and decode workers hand blocks to each other: their pools must match exactly.
  const bool handoff = info.role() == v1::ROLE_PREFILL || info.role() == v1::ROLE_DECODE;
  if (handoff && info.has_kv_layout() && pool.kv_layout.has_value()) {
    STRATA_RETURN_IF_ERROR(proto::CheckSameKvLayout(*pool.kv_layout, info.kv_layout(),
                                                    absl::StrCat("worker ", info.id())));
  }
  const auto& profiles = pool.profiles != nullptr ? pool.profiles : default_profiles_;
  if (profiles != nullptr) {
    absl::StatusOr<const WorkerProfile*> chosen =
        ChooseProfile(*profiles, info.model(), info.device());
    if (!chosen.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", info.id(), ": ", chosen.status().message()));
    }
    *profile = std::shared_ptr<const WorkerProfile>(profiles, *chosen);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> WorkerPool::Register(const v1::WorkerInfo& info, const std::string& peer) {
  if (info.id().empty() || info.grpc_address().empty()) {
    return absl::InvalidArgumentError("a worker needs an id and a gRPC address");
  }
  if (info.role() == v1::ROLE_UNSPECIFIED) return absl::InvalidArgumentError("worker role unset");
  absl::MutexLock lock(&mu_);
  if (auto held = workers_.find(info.id()); held != workers_.end() && held->second.peer != peer) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker id ", info.id(), " is registered by another certificate (", held->second.peer,
        "); it is free once that worker deregisters or misses its heartbeats"));
  }
  Entry e;
  // A kvstore daemon holds blocks for the workers (tier 3) and is never placed on: it neither
  // fixes nor has to match a pool's block size, and its model identity (if it names one) only
  // has to match the pool's. It hashes nothing, so it needs no key.
  if (info.role() == v1::ROLE_KVSTORE) {
    for (const auto& [name, pool] : pools_) {
      if (pool.model_identity.empty() || info.model_identity().empty() ||
          info.model_identity() == pool.model_identity) {
        e.pools.push_back(name);
      }
    }
    if (e.pools.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kvstore ", info.id(), " holds another model's blocks (identity ",
          info.model_identity(), ", served: ", absl::StrJoin(ServedIdentities(), ", "), ")"));
    }
  } else {
    Pool* pool = FindPool(info.model());
    if (pool == nullptr) {
      std::vector<std::string> names;
      for (const auto& [name, p] : pools_) names.push_back(name);
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", info.id(), " serves model '", info.model(),
                       "', which this router does not serve (it serves ",
                       absl::StrJoin(names, ", "), ")"));
    }
    STRATA_RETURN_IF_ERROR(CheckWorker(info, *pool, &e.view.profile));
    pool->model_identity = info.model_identity();
    pool->block_size = info.block_size();
    const bool handoff = info.role() == v1::ROLE_PREFILL || info.role() == v1::ROLE_DECODE;
    if (handoff && info.has_kv_layout() && !pool->kv_layout.has_value()) {
      pool->kv_layout = info.kv_layout();
    }
    e.pools.push_back(pools_.size() == 1 ? pools_.begin()->first : info.model());
  }
  if (workers_.contains(info.id())) EraseLocked(info.id());
  e.view.index_id = next_index_id_++;
  e.view.id = info.id();
  e.view.role = RoleFromProto(info.role());
  e.view.grpc_address = info.grpc_address();
  e.view.last_heartbeat = absl::Now();
  // Its calls are the router's reactors (cluster_backend.cc).
  e.stub = proto::ShareCallbackStub(v1::Worker::NewStub(proto::MakeChannel(info.grpc_address())));
  e.peer = peer;
  for (const std::string& name : e.pools) {
    (void)pools_.find(name)->second.index->RegisterWorker(e.view.index_id);
  }
  workers_[info.id()] = std::move(e);
  STRATA_LOG(Info) << "worker " << info.id() << " registered (" << v1::Role_Name(info.role())
                   << " at " << info.grpc_address() << ") serving model '" << info.model()
                   << "'";
  return epoch_;
}

std::vector<std::string> WorkerPool::ServedIdentities() const {
  std::vector<std::string> out;
  for (const auto& [name, pool] : pools_) {
    if (!pool.model_identity.empty()) out.push_back(pool.model_identity);
  }
  return out;
}

void WorkerPool::EraseLocked(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  for (const std::string& name : it->second.pools) {
    if (auto pool = pools_.find(name); pool != pools_.end()) {
      (void)pool->second.index->RemoveWorker(it->second.view.index_id);
    }
  }
  workers_.erase(it);
}

absl::Status WorkerPool::Heartbeat(const v1::HeartbeatRequest& req, const std::string& peer) {
  WorkerId index_id;
  bool is_kvstore = false;
  std::vector<KvIndex*> indices;  // its pools' (pools live as long as the WorkerPool)
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(req.worker_id());
    if (it != workers_.end() && it->second.peer != peer) {
      return absl::PermissionDeniedError(
          absl::StrCat("worker ", req.worker_id(), " is registered by another certificate"));
    }
    if (it == workers_.end() || req.epoch() != epoch_) {
      return absl::NotFoundError(absl::StrCat("unknown worker ", req.worker_id()));
    }
    const bool was_stalled = it->second.view.load.stalled;
    it->second.view.load = LoadFromProto(req.load());
    if (it->second.view.load.stalled != was_stalled) {
      if (was_stalled) {
        STRATA_LOG(Info) << "worker " << req.worker_id() << " reports its engine progressing again";
      } else {
        STRATA_LOG(Warning) << "worker " << req.worker_id() << " reports its engine stalled for "
                            << req.load().stalled_seconds() << " s: placing nothing there";
      }
    }
    it->second.view.last_heartbeat = absl::Now();
    index_id = it->second.view.index_id;
    is_kvstore = it->second.view.role == WorkerRole::kKvstore;
    for (const std::string& name : it->second.pools) {
      if (auto pool = pools_.find(name); pool != pools_.end()) {
        indices.push_back(pool->second.index.get());
      }
    }
  }
  // Workers report their device pool (tier 0) and their lower tiers (1 host, 2 disk); a kvstore
  // daemon's blocks are the remote tier (3), whatever its events say. Events are applied per
  // tier, in order within each tier (tiers are independent in the index).
  std::array<std::vector<KvEvent>, kNumTiers> by_tier;
  for (const auto& e : req.events()) {
    uint32_t tier = e.tier();
    if (is_kvstore) {
      tier = static_cast<uint32_t>(Tier::kRemote);
    } else if (tier >= static_cast<uint32_t>(Tier::kRemote)) {
      continue;  // a worker does not speak for the remote tier
    }
    KvEvent::Kind kind;
    switch (e.kind()) {
      case v1::KvEvent::STORED:
        kind = KvEvent::Kind::kStored;
        break;
      case v1::KvEvent::REMOVED:
        kind = KvEvent::Kind::kRemoved;
        break;
      case v1::KvEvent::CLEARED:
        kind = KvEvent::Kind::kCleared;
        break;
      default:
        continue;  // a kind this router does not know
    }
    by_tier[tier].push_back({kind, e.hash(), e.parent_hash()});
  }
  // A worker removed meanwhile is fine to ignore: its events no longer matter.
  const double now_s = MonotonicSeconds();
  for (KvIndex* index : indices) {
    index->ExpireProvisional(now_s);
    for (int t = 0; t < kNumTiers; ++t) {
      if (!by_tier[t].empty()) (void)index->ApplyBatch(index_id, static_cast<Tier>(t), by_tier[t]);
    }
  }
  return absl::OkStatus();
}

void WorkerPool::Remove(const std::string& worker_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!workers_.contains(worker_id)) return;
  EraseLocked(worker_id);
  STRATA_LOG(Warning) << "worker " << worker_id << " removed: " << reason;
}

void WorkerPool::Deregister(const std::string& worker_id, const std::string& peer) {
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) return;
    if (it->second.peer != peer) {
      STRATA_LOG(Warning) << "deregistration of worker " << worker_id
                          << " refused: it was registered by another certificate";
      return;
    }
  }
  Remove(worker_id, "deregistered");
}

std::vector<std::string> WorkerPool::ExpireStale() {
  std::vector<std::string> stale;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, e] : workers_) {
      if (now - e.view.last_heartbeat > dead_after_) stale.push_back(id);
    }
  }
  for (const auto& id : stale) Remove(id, "missed heartbeats");
  return stale;
}

std::vector<WorkerView> WorkerPool::Snapshot(
    std::vector<std::shared_ptr<v1::Worker::Stub>>* stubs) const {
  absl::MutexLock lock(&mu_);
  return SnapshotLocked(nullptr, stubs);
}

std::vector<WorkerView> WorkerPool::SnapshotModel(
    std::string_view model, std::vector<std::shared_ptr<v1::Worker::Stub>>* stubs) const {
  absl::MutexLock lock(&mu_);
  std::string name;
  if (pools_.size() == 1) {
    name = pools_.begin()->first;
  } else if (pools_.contains(model)) {
    name = std::string(model);
  } else {
    if (stubs != nullptr) stubs->clear();
    return {};
  }
  return SnapshotLocked(&name, stubs);
}

std::vector<WorkerView> WorkerPool::SnapshotLocked(
    const std::string* pool, std::vector<std::shared_ptr<v1::Worker::Stub>>* stubs) const {
  std::vector<const Entry*> entries;
  entries.reserve(workers_.size());
  for (const auto& [id, e] : workers_) {
    if (pool == nullptr || absl::c_linear_search(e.pools, *pool)) entries.push_back(&e);
  }
  // A stable order, so round-robin rotates and ties break the same way every time.
  std::sort(entries.begin(), entries.end(),
            [](const Entry* a, const Entry* b) { return a->view.id < b->view.id; });
  std::vector<WorkerView> out;
  out.reserve(entries.size());
  for (const Entry* e : entries) out.push_back(e->view);
  if (stubs != nullptr) {
    stubs->clear();
    for (const Entry* e : entries) stubs->push_back(e->stub);
  }
  return out;
}

std::vector<std::string> WorkerPool::KvstoreAddresses() const {
  std::vector<std::string> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : workers_) {
      if (e.view.role == WorkerRole::kKvstore) out.push_back(e.view.grpc_address);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void WorkerPool::AddInflight(const std::string& worker_id, int64_t delta) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.view.inflight += delta;
}

void WorkerPool::NoteRouted(const std::string& worker_id, std::span<const BlockHash> chain,
                            std::string_view model) {
  if (chain.empty()) return;
  KvIndex* index = nullptr;
  WorkerId index_id = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    Pool* pool = FindPool(model);
    if (it == workers_.end() || pool == nullptr) return;
    index = pool->index.get();
    index_id = it->second.view.index_id;
  }
  // A worker removed meanwhile is not in the index any more: nothing to note.
  (void)index->NoteRouted(index_id, chain, MonotonicSeconds(), kProvisionalTtlS);
}

int WorkerPool::num_workers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

std::vector<std::string> WorkerPool::ServedModels() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, pool] : pools_) out.push_back(name);
  return out;
}

bool WorkerPool::Serves(std::string_view model) const {
  absl::MutexLock lock(&mu_);
  return FindPool(model) != nullptr;
}

std::vector<WorkerMatch> WorkerPool::MatchPrefix(std::span<const BlockHash> chain,
                                                 std::string_view model) const {
  const KvIndex* index = nullptr;
  {
    absl::MutexLock lock(&mu_);
    const Pool* pool = FindPool(model);
    if (pool == nullptr) return {};
    index = pool->index.get();
  }
  return index->MatchPrefix(chain);
}

int64_t WorkerPool::num_index_blocks(std::string_view model) const {
  std::vector<const KvIndex*> indices;
  {
    absl::MutexLock lock(&mu_);
    if (const Pool* pool = FindPool(model)) {
      indices.push_back(pool->index.get());
    } else if (model.empty()) {
      for (const auto& [name, p] : pools_) indices.push_back(p.index.get());
    }
  }
  int64_t n = 0;
  for (const KvIndex* index : indices) n += index->num_blocks();
  return n;
}

int WorkerPool::block_size(std::string_view model) const {
  absl::MutexLock lock(&mu_);
  const Pool* pool = FindPool(model);
  return pool == nullptr ? 0 : pool->block_size;
}

BlockHasher WorkerPool::Hasher(std::string_view cache_salt, std::string_view model) const {
  const std::string identity = model_identity(model);
  if (identity.empty()) return BlockHasher(0, kv_hash_key_);
  return BlockHasher(BlockHashSeed(identity, ""), kv_hash_key_).Salted(cache_salt);
}

std::string WorkerPool::model_identity(std::string_view model) const {
  absl::MutexLock lock(&mu_);
  const Pool* pool = FindPool(model);
  return pool == nullptr ? std::string() : pool->model_identity;
}

}  // namespace strata::router
