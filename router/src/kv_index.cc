#include "strata/router/kv_index.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"

namespace strata::router {
namespace {

bool ValidTier(Tier tier) { return static_cast<int>(tier) < kNumTiers; }

// Per-worker progress of one MatchPrefix walk.
struct WalkState {
  int32_t last_step = -1;   // last chain index this worker held (contiguously from 0)
  uint8_t alive_tiers = 0;  // tiers that held every block up to last_step
  std::array<int32_t, kNumTiers> tier_blocks{};  // set when a tier drops out, or at the end
};

// Advances every worker that held chain[0, step) by chain[step], whose holders are `holders`
// (a range of {slot, tiers}). Returns how many workers still match.
template <typename HolderRange>
int WalkStep(const HolderRange& holders, int32_t step, std::vector<WalkState>& walk,
             std::vector<uint32_t>& matched) {
  int survivors = 0;
  for (const auto& holder : holders) {
    WalkState& w = walk[holder.slot];
    if (step == 0) {
      w.alive_tiers = holder.tiers;
      matched.push_back(holder.slot);
    } else if (w.last_step != step - 1) {
      continue;  // missed an earlier block: its prefix already ended
    } else if (const uint8_t dropped = w.alive_tiers & ~holder.tiers; dropped != 0) {
      // Tiers that held chain[0, step) but not chain[step]: their prefix ends here.
      for (int t = 0; t < kNumTiers; ++t) {
        if (dropped & (1u << t)) w.tier_blocks[t] = step;
      }
      w.alive_tiers &= holder.tiers;
    }
    w.last_step = step;
    ++survivors;
  }
  return survivors;
}

WorkerMatch FinishWalk(WorkerId worker, const WalkState& w) {
  WorkerMatch match{worker, w.last_step + 1, w.tier_blocks};
  for (int t = 0; t < kNumTiers; ++t) {  // tiers that held the whole matched prefix
    if (w.alive_tiers & (1u << t)) match.tier_blocks[t] = w.last_step + 1;
  }
  return match;
}

}  // namespace

absl::Status KvIndex::RegisterWorker(WorkerId worker) {
  absl::MutexLock lock(&mu_);
  if (slot_of_.contains(worker)) {
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker, " already registered"));
  }
  Slot slot;
  if (free_slots_.empty()) {
    slot = static_cast<Slot>(workers_.size());
    workers_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  WorkerState& state = workers_[slot];
  state.id = worker;
  slot_of_[worker] = slot;
  return absl::OkStatus();
}

absl::Status KvIndex::RemoveWorker(WorkerId worker) {
  absl::MutexLock lock(&mu_);
  Slot slot;
  STRATA_RETURN_IF_ERROR(FindSlot(worker, &slot));
  WorkerState& state = workers_[slot];
  for (BlockHash hash : state.blocks) {
    auto it = blocks_.find(hash);
    if (it == blocks_.end()) continue;  // unreachable: blocks_ and state.blocks agree
    Holders& holders = it->second;
    auto pos = std::find_if(holders.begin(), holders.end(),
                            [slot](const Holder& h) { return h.slot == slot; });
    if (pos != holders.end()) {
      *pos = holders.back();
      holders.pop_back();
    }
    if (holders.empty()) blocks_.erase(it);
  }
  state = WorkerState();
  slot_of_.erase(worker);
  free_slots_.push_back(slot);
  return absl::OkStatus();
}

absl::Status KvIndex::Apply(WorkerId worker, Tier tier, const KvEvent& event) {
  absl::MutexLock lock(&mu_);
  Slot slot;
  STRATA_RETURN_IF_ERROR(FindSlot(worker, &slot));
  return ApplyLocked(slot, tier, event);
}

absl::Status KvIndex::ApplyBatch(WorkerId worker, Tier tier, std::span<const KvEvent> events) {
  absl::MutexLock lock(&mu_);
  Slot slot;
  STRATA_RETURN_IF_ERROR(FindSlot(worker, &slot));
  for (const KvEvent& event : events) {
    STRATA_RETURN_IF_ERROR(ApplyLocked(slot, tier, event));
  }
  return absl::OkStatus();
}

absl::Status KvIndex::NoteRouted(WorkerId worker, std::span<const BlockHash> chain, double now_s,
                                double ttl_s) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_s);
  Slot slot;
  STRATA_RETURN_IF_ERROR(FindSlot(worker, &slot));
  WorkerState& state = workers_[slot];
  BlockHash parent = kRootBlockHash;
  for (BlockHash hash : chain) {
    if (!state.blocks.contains(hash)) {
      StoreLocked(slot, static_cast<int>(Tier::kGpu), KvEvent{KvEvent::Kind::kStored, hash, parent});
      --stats_.events_applied;  // not an event
      state.provisional.insert(hash);
      expiries_.push_back(Expiry{now_s + ttl_s, worker, hash});
      ++stats_.provisional_stores;
    }
    parent = hash;
  }
  return absl::OkStatus();
}

void KvIndex::ExpireProvisional(double now_s) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now_s);
}

void KvIndex::ExpireLocked(double now_s) {
  while (!expiries_.empty() && expiries_.front().deadline_s <= now_s) {
    const Expiry e = expiries_.front();
    expiries_.pop_front();
    Slot slot;
    if (!FindSlot(e.worker, &slot).ok()) continue;
    if (!workers_[slot].provisional.contains(e.hash)) continue;
    DropProvisionalLocked(slot, e.hash);
    ++stats_.provisional_expired;
  }
}

void KvIndex::DropProvisionalLocked(Slot slot, BlockHash hash) {
  if (workers_[slot].provisional.erase(hash) == 0) return;
  const int64_t unknown = stats_.unknown_removes;
  RemoveLocked(slot, static_cast<int>(Tier::kGpu), hash);
  --stats_.events_applied;  // not an event
  stats_.unknown_removes = unknown;
}

absl::Status KvIndex::ApplyLocked(Slot slot, Tier tier, const KvEvent& event) {
  if (!ValidTier(tier)) {
    return absl::InvalidArgumentError(absl::StrCat("bad tier ", static_cast<int>(tier)));
  }
  // The worker's own word on a block replaces a provisional entry for it.
  if (event.kind != KvEvent::Kind::kCleared && !workers_[slot].provisional.empty()) {
    DropProvisionalLocked(slot, event.hash);
  }
  switch (event.kind) {
    case KvEvent::Kind::kStored:
      StoreLocked(slot, static_cast<int>(tier), event);
      return absl::OkStatus();
    case KvEvent::Kind::kRemoved:
      RemoveLocked(slot, static_cast<int>(tier), event.hash);
      return absl::OkStatus();
    case KvEvent::Kind::kCleared:
      ClearTierLocked(slot, static_cast<int>(tier));
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("bad event kind ", static_cast<int>(event.kind)));
}

void KvIndex::StoreLocked(Slot slot, int tier, const KvEvent& event) {
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  auto [it, inserted] = blocks_.try_emplace(event.hash);
  if (inserted && event.parent_hash != kRootBlockHash && !blocks_.contains(event.parent_hash)) {
    ++stats_.orphan_stores;
  }
  Holders& holders = it->second;
  auto pos = std::find_if(holders.begin(), holders.end(),
                          [slot](const Holder& h) { return h.slot == slot; });
  WorkerState& worker = workers_[slot];
  if (pos == holders.end()) {
    holders.push_back(Holder{slot, bit});
    worker.blocks.insert(event.hash);
  } else if (pos->tiers & bit) {
    ++stats_.duplicate_stores;
    return;
  } else {
    pos->tiers |= bit;
  }
  ++worker.tier_blocks[tier];
  ++stats_.events_applied;
}

void KvIndex::RemoveLocked(Slot slot, int tier, BlockHash hash) {
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  auto it = blocks_.find(hash);
  if (it == blocks_.end()) {
    ++stats_.unknown_removes;
    return;
  }
  Holders& holders = it->second;
  auto pos = std::find_if(holders.begin(), holders.end(),
                          [slot](const Holder& h) { return h.slot == slot; });
  if (pos == holders.end() || !(pos->tiers & bit)) {
    ++stats_.unknown_removes;
    return;
  }
  WorkerState& worker = workers_[slot];
  --worker.tier_blocks[tier];
  ++stats_.events_applied;
  pos->tiers &= static_cast<uint8_t>(~bit);
  if (pos->tiers != 0) return;
  worker.blocks.erase(hash);
  *pos = holders.back();
  holders.pop_back();
  if (holders.empty()) blocks_.erase(it);
}

void KvIndex::ClearTierLocked(Slot slot, int tier) {
  WorkerState& worker = workers_[slot];
  if (tier == static_cast<int>(Tier::kGpu)) worker.provisional.clear();
  if (worker.tier_blocks[tier] == 0) return;
  // Collected first: RemoveLocked erases from worker.blocks as a block's last tier goes.
  std::vector<BlockHash> held;
  held.reserve(worker.blocks.size());
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  for (BlockHash hash : worker.blocks) {
    auto it = blocks_.find(hash);
    if (it == blocks_.end()) continue;
    for (const Holder& h : it->second) {
      if (h.slot == slot && (h.tiers & bit)) held.push_back(hash);
    }
  }
  for (BlockHash hash : held) RemoveLocked(slot, tier, hash);
}

absl::Status KvIndex::FindSlot(WorkerId worker, Slot* slot) const {
  auto it = slot_of_.find(worker);
  if (it == slot_of_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker, " not registered"));
  }
  *slot = it->second;
  return absl::OkStatus();
}

std::vector<WorkerMatch> KvIndex::MatchPrefix(std::span<const BlockHash> chain) const {
  // The chain is resolved a window at a time: the lookups of a window are independent, so
  // prefetching them overlaps their cache misses instead of paying one per step.
  constexpr size_t kWindow = 16;
  absl::ReaderMutexLock lock(&mu_);
  std::vector<WalkState> walk(workers_.size());
  std::vector<uint32_t> matched;  // slots that held chain[0], in first-seen order
  std::array<const Holders*, kWindow> window;
  bool done = false;
  for (size_t begin = 0; begin < chain.size() && !done; begin += kWindow) {
    const size_t end = std::min(chain.size(), begin + kWindow);
    for (size_t i = begin; i < end; ++i) blocks_.prefetch(chain[i]);
    for (size_t i = begin; i < end; ++i) {
      auto it = blocks_.find(chain[i]);
      window[i - begin] = it == blocks_.end() ? nullptr : &it->second;
      if (it != blocks_.end()) __builtin_prefetch(it->second.data());
    }
    for (size_t i = begin; i < end && !done; ++i) {
      const Holders* holders = window[i - begin];
      done = holders == nullptr || WalkStep(*holders, static_cast<int32_t>(i), walk, matched) == 0;
    }
  }
  std::vector<WorkerMatch> result;
  result.reserve(matched.size());
  for (uint32_t slot : matched) {
    result.push_back(FinishWalk(workers_[slot].id, walk[slot]));
  }
  std::sort(result.begin(), result.end(),
            [](const WorkerMatch& a, const WorkerMatch& b) { return a.worker < b.worker; });
  return result;
}

int64_t KvIndex::num_blocks() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(blocks_.size());
}

int64_t KvIndex::num_worker_blocks(WorkerId worker) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = slot_of_.find(worker);
  if (it == slot_of_.end()) return 0;
  return static_cast<int64_t>(workers_[it->second].blocks.size());
}

int64_t KvIndex::num_worker_blocks(WorkerId worker, Tier tier) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = slot_of_.find(worker);
  if (it == slot_of_.end() || !ValidTier(tier)) return 0;
  return workers_[it->second].tier_blocks[static_cast<int>(tier)];
}

int KvIndex::num_workers() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(slot_of_.size());
}

KvIndexStats KvIndex::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  return stats_;
}

}  // namespace strata::router
