// The engine's side of the lower KV tiers: handing evicted (or committed) blocks' bytes out,
// and bringing fetched blocks back into the prefix cache.
#include <cstring>

#include "strata/common/logging.h"
#include "strata/engine/engine.h"

namespace strata {

void Engine::SetBlockOffload(OffloadOn when, BlockOffloadFn fn) {
  offload_on_ = when;
  offload_ = std::move(fn);
  block_staging_.resize(runner_->kv_block_bytes());
}

void Engine::OnKvEvent(const KvCacheEvent& event) {
  if (offload_) {
    const bool evicted = event.kind == KvCacheEvent::Kind::kRemoved;
    if (evicted == (offload_on_ == OffloadOn::kEvict)) OffloadBlock(event);
  }
  if (kv_listener_) kv_listener_(event);
}

void Engine::OffloadBlock(const KvCacheEvent& event) {
  // On eviction the block is about to be reused, but nothing has overwritten it yet: Allocate
  // hands it out and only a later forward pass writes it.
  const size_t bytes = runner_->kv_block_bytes();
  const auto* base = static_cast<const std::byte*>(runner_->kv_cache().data);
  absl::Status s = runner_->backend().CopyToHost(
      block_staging_.data(), base + static_cast<size_t>(event.block) * bytes, bytes);
  if (!s.ok()) {
    STRATA_LOG(Warning) << "KV offload of block " << event.block << " failed: " << s;
    return;
  }
  offload_(event.hash, event.parent, std::span<const std::byte>(block_staging_.data(), bytes));
}

int Engine::ImportCachedBlocks(std::span<const BlockHash> keep_cached,
                               std::span<const ImportedBlock> blocks, const BlockFillFn& fill) {
  const size_t bytes = runner_->kv_block_bytes();
  if (block_staging_.size() < bytes) block_staging_.resize(bytes);
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
    auto block = blocks_->Allocate();
    if (!block.ok()) {
      STRATA_LOG(Warning) << "KV import stopped at block " << i << " of " << blocks.size()
                          << ": no free device block: " << block.status();
      break;
    }
    absl::Status s = fill(i, std::span<std::byte>(block_staging_.data(), bytes));
    if (s.ok()) {
      s = runner_->backend().CopyToDevice(base + static_cast<size_t>(*block) * bytes,
                                          block_staging_.data(), bytes);
    }
    if (!s.ok()) {
      STRATA_LOG(Warning) << "KV import stopped at block " << i << " of " << blocks.size()
                          << ": " << s;
      blocks_->Release(*block);
      break;
    }
    blocks_->Commit(*block, blocks[i].hash, blocks[i].parent);
    held.push_back(*block);
    ++imported;
  }
  // Release in acquisition order so the imported tail stays the most recently used.
  for (BlockId b : held) blocks_->Release(b);
  if (!runner_->backend().Synchronize().ok()) {
    STRATA_LOG(Warning) << "KV import: device synchronize failed";
  }
  return imported;
}

}  // namespace strata
