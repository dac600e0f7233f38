#include "strata/engine/block_manager.h"

#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"

namespace strata {

BlockManager::BlockManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      num_free_(num_blocks),
      ref_count_(num_blocks, 0),
      hash_(num_blocks, 0),
      parent_(num_blocks, kRootBlockHash),
      has_hash_(num_blocks, 0),
      lru_prev_(num_blocks, kNone),
      lru_next_(num_blocks, kNone) {
  STRATA_CHECK(num_blocks > 0 && block_size > 0) << num_blocks << " blocks of " << block_size;
  unused_.reserve(num_blocks);
  // Hand out low ids first (stack pops from the back).
  for (BlockId b = num_blocks - 1; b >= 0; --b) unused_.push_back(b);
}

absl::StatusOr<BlockId> BlockManager::Allocate() {
  BlockId block;
  if (!unused_.empty()) {
    block = unused_.back();
    unused_.pop_back();
  } else if (lru_head_ != kNone) {
    block = lru_head_;
    LruRemove(block);
    Uncache(block);
    ++stats_.evictions;
  } else {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", num_blocks(), " KV blocks are in use"));
  }
  ref_count_[block] = 1;
  --num_free_;
  return block;
}

void BlockManager::Ref(BlockId block) {
  STRATA_CHECK(block >= 0 && block < num_blocks()) << block;
  if (ref_count_[block]++ == 0) {
    // A cached free block comes back into use.
    STRATA_CHECK(has_hash_[block]) << "Ref of free uncached block " << block;
    LruRemove(block);
    --num_free_;
  }
}

void BlockManager::Release(BlockId block) {
  STRATA_CHECK(block >= 0 && block < num_blocks() && ref_count_[block] > 0)
      << "double release of block " << block;
  if (--ref_count_[block] > 0) return;
  ++num_free_;
  if (has_hash_[block]) {
    LruPushBack(block);
  } else {
    unused_.push_back(block);
  }
}

void BlockManager::ReleaseAll(std::span<const BlockId> blocks) {
  // Release in reverse so a sequence's tail blocks are evicted before its head blocks.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) Release(*it);
}

std::vector<BlockId> BlockManager::AcquireCachedPrefix(std::span<const BlockHash> hashes) {
  std::vector<BlockId> out;
  if (!prefix_caching_) return out;
  stats_.prefix_queries += static_cast<int64_t>(hashes.size());
  for (BlockHash h : hashes) {
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    Ref(it->second);
    out.push_back(it->second);
  }
  stats_.prefix_hits += static_cast<int64_t>(out.size());
  return out;
}

int BlockManager::CountCachedPrefix(std::span<const BlockHash> hashes) const {
  if (!prefix_caching_) return 0;
  int n = 0;
  for (BlockHash h : hashes) {
    if (!cached_.contains(h)) break;
    ++n;
  }
  return n;
}

void BlockManager::Commit(BlockId block, BlockHash hash, BlockHash parent) {
  if (!prefix_caching_ || has_hash_[block]) return;
  auto [it, inserted] = cached_.try_emplace(hash, block);
  if (!inserted) return;  // an identical block is already cached
  hash_[block] = hash;
  parent_[block] = parent;
  has_hash_[block] = 1;
  if (listener_) listener_({KvCacheEvent::Kind::kStored, hash, block, parent});
}

BlockId BlockManager::FindCached(BlockHash hash) const {
  auto it = cached_.find(hash);
  return it == cached_.end() ? kNone : it->second;
}

std::vector<BlockHash> BlockManager::CachedHashes() const {
  std::vector<BlockHash> out;
  out.reserve(cached_.size());
  for (const auto& [hash, block] : cached_) out.push_back(hash);
  return out;
}

void BlockManager::Uncache(BlockId block) {
  if (!has_hash_[block]) return;
  cached_.erase(hash_[block]);
  has_hash_[block] = 0;
  if (listener_) listener_({KvCacheEvent::Kind::kRemoved, hash_[block], block, parent_[block]});
}

void BlockManager::LruPushBack(BlockId block) {
  lru_prev_[block] = lru_tail_;
  lru_next_[block] = kNone;
  if (lru_tail_ != kNone) {
    lru_next_[lru_tail_] = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
}

void BlockManager::LruRemove(BlockId block) {
  const BlockId prev = lru_prev_[block];
  const BlockId next = lru_next_[block];
  if (prev != kNone) {
    lru_next_[prev] = next;
  } else {
    lru_head_ = next;
  }
  if (next != kNone) {
    lru_prev_[next] = prev;
  } else {
    lru_tail_ = prev;
  }
  lru_prev_[block] = lru_next_[block] = kNone;
}

}  // namespace strata
