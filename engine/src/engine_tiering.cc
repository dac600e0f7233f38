// The engine's side of the lower KV tiers: handing evicted (or committed) blocks' bytes out,
// and bringing fetched blocks back into the prefix cache, both through a ring of host staging
// slots (kv_staging.h) so that a batch of block copies costs one synchronize, not one each.
#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "kv_staging.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/engine/engine.h"

namespace strata {

absl::StatusOr<std::unique_ptr<KvStaging>> KvStaging::Create(Backend* backend, size_t slot_bytes,
                                                             size_t slots) {
  constexpr size_t kPage = 4096;
  const size_t bytes = (slot_bytes * slots + kPage - 1) / kPage * kPage;
  std::unique_ptr<KvStaging> st(new KvStaging(backend, slot_bytes, slots));
  st->memory_.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, bytes)));
  if (st->memory_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV staging: cannot allocate ", bytes, " bytes of host memory"));
  }
  if (!backend->plugin().has_host_register()) return st;
  const absl::Status s = backend->RegisterHost(st->memory_.get(), bytes);
  if (s.ok()) {
    st->registered_ = true;
  } else {
    STRATA_LOG(Warning) << "KV staging: " << bytes
                        << " bytes stay pageable (block copies wait for the device): " << s;
  }
  return st;
}

KvStaging::~KvStaging() {
  if (registered_) backend_->UnregisterHost(memory_.get());
}

void Engine::SetBlockOffload(OffloadOn when, BlockOffloadFn fn) {
  FlushKvOffloads();  // pending blocks go to the function they were staged for
  DropOffloadTarget();
  offload_on_ = when;
  offload_ = std::move(fn);
}

absl::Status Engine::SetBlockOffloadTarget(OffloadOn when, BlockOffloadTarget target,
                                           std::span<std::byte> memory) {
  if (!target.reserve || !target.finish) {
    return absl::InvalidArgumentError("KV offload target: reserve and finish are both needed");
  }
  FlushKvOffloads();
  DropOffloadTarget();
  Backend& backend = runner_->backend();
  if (backend.plugin().has_host_register() && !memory.empty()) {
    STRATA_RETURN_IF_ERROR(backend.RegisterHost(memory.data(), memory.size()));
    target_registered_ = memory.data();
  }
  offload_on_ = when;
  offload_ = nullptr;
  target_ = std::move(target);
  return absl::OkStatus();
}

void Engine::DropOffloadTarget() {
  if (target_registered_ != nullptr) runner_->backend().UnregisterHost(target_registered_);
  target_registered_ = nullptr;
  target_ = {};
}

void Engine::OnKvEvent(const KvCacheEvent& event) {
  if (offload_ || target_.reserve) {
    const bool evicted = event.kind == KvCacheEvent::Kind::kRemoved;
    if (evicted == (offload_on_ == OffloadOn::kEvict)) OffloadBlock(event);
  }
  if (kv_listener_) kv_listener_(event);
}

absl::StatusOr<std::span<std::byte>> Engine::AcquireStagingSlot() {
  if (staging_ == nullptr) {
    const size_t bytes = runner_->kv_block_bytes();
    const size_t slots = std::clamp<size_t>(options_.kv_staging_bytes / bytes, 1, 4096);
    auto staging = KvStaging::Create(&runner_->backend(), bytes, slots);
    if (!staging.ok()) return staging.status();
    staging_ = *std::move(staging);
  }
  if (staging_used_ == staging_->slots()) FlushKvOffloads();
  return staging_->slot(staging_used_++);
}

void Engine::OffloadBlock(const KvCacheEvent& event) {
  // On eviction the block is about to be reused, but nothing has overwritten it yet: Allocate
  // hands it out and only later work writes it, either on this stream (a forward pass, an
  // import: ordered after the copy) or from outside it (a KV transfer into a reservation:
  // ReservePrompt flushes before it returns the blocks).
  const size_t bytes = runner_->kv_block_bytes();
  const auto* base = static_cast<const std::byte*>(runner_->kv_cache().data);
  const std::byte* src = base + static_cast<size_t>(event.block) * bytes;
  if (target_.reserve) {
    absl::StatusOr<BlockOffloadSlot> slot = target_.reserve(event.hash, event.parent);
    if (!slot.ok()) {
      if (!absl::IsAlreadyExists(slot.status()) && !absl::IsResourceExhausted(slot.status())) {
        STRATA_LOG(Warning) << "KV offload of block " << event.block << ": " << slot.status();
      }
      return;
    }
    absl::Status s = slot->bytes.size() == bytes
                         ? runner_->backend().CopyToHostAsync(slot->bytes.data(), src, bytes)
                         : absl::InternalError(
                               absl::StrCat("the target reserved ", slot->bytes.size(), " bytes"));
    if (!s.ok()) {
      STRATA_LOG(Warning) << "KV offload of block " << event.block << " failed: " << s;
      target_.finish(slot->id, false);
      return;
    }
    pending_direct_.push_back(slot->id);
    return;
  }
  absl::StatusOr<std::span<std::byte>> dst = AcquireStagingSlot();
  absl::Status s = dst.status();
  if (s.ok()) {
    s = runner_->backend().CopyToHostAsync(dst->data(), src, bytes);
  }
  if (!s.ok()) {
    STRATA_LOG(Warning) << "KV offload of block " << event.block << " failed: " << s;
    return;
  }
  pending_offloads_.push_back({event.hash, event.parent, staging_used_ - 1});
}

void Engine::FlushKvOffloads() {
  if (staging_used_ == 0 && pending_direct_.empty()) return;
  const absl::Status s = runner_->backend().Synchronize();
  if (!s.ok()) {
    STRATA_LOG(Warning) << "KV offload: device synchronize failed, "
                        << pending_offloads_.size() + pending_direct_.size()
                        << " staged blocks dropped: " << s;
  } else if (offload_) {
    for (const PendingOffload& p : pending_offloads_) {
      offload_(p.hash, p.parent, staging_->slot(p.slot));
    }
  }
  for (uint64_t id : pending_direct_) target_.finish(id, s.ok());
  pending_offloads_.clear();
  pending_direct_.clear();
  staging_used_ = 0;
}

int Engine::ImportCachedBlocks(std::span<const BlockHash> keep_cached,
                               std::span<const ImportedBlock> blocks, const BlockFillFn& fill) {
  const size_t bytes = runner_->kv_block_bytes();
  auto* base = static_cast<std::byte*>(runner_->kv_cache().data);
  // Held while importing so that allocations cannot evict the chain being extended.
  std::vector<BlockId> held = blocks_->AcquireCachedPrefix(keep_cached);
  int imported = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockId existing = blocks_->FindCached(blocks[i].hash);
    if (existing >= 0) {
      blocks_->Ref(existing);
      held.push_back(existing);
      ++imported;
      continue;
    }
    auto block = blocks_->Allocate();  // may evict, staging an offload first
    if (!block.ok()) {
      STRATA_LOG(Warning) << "KV import stopped at block " << i << " of " << blocks.size()
                          << ": no free device block: " << block.status();
      break;
    }
    // A slot no copy is using (the ring flushes when full); page-locked, the copy in may still
    // be reading it after CopyToDevice returns, so it is not reused before the next flush.
    absl::StatusOr<std::span<std::byte>> slot = AcquireStagingSlot();
    absl::Status s = slot.status();
    if (s.ok()) s = fill(i, *slot);
    if (s.ok()) {
      s = runner_->backend().CopyToDevice(base + static_cast<size_t>(*block) * bytes, slot->data(),
                                          bytes);
    }
    if (!s.ok()) {
      STRATA_LOG(Warning) << "KV import stopped at block " << i << " of " << blocks.size() << ": "
                          << s;
      blocks_->Release(*block);
      break;
    }
    blocks_->Commit(*block, blocks[i].hash, blocks[i].parent);
    held.push_back(*block);
    ++imported;
  }
  // Release in acquisition order so the imported tail stays the most recently used.
  for (BlockId b : held) blocks_->Release(b);
  FlushKvOffloads();  // the copies in are complete when this returns
  return imported;
}

}  // namespace strata
