#pragma once
// Paged KV block allocation with a prefix cache.
//
// Blocks are ref-counted. A block whose contents are complete (a full block of computed KV)
// may be committed under its chain hash (strata/common/block_hash.h); later requests whose
// prompt has the same hash chain reuse it instead of recomputing. When a committed block's
// refcount falls to zero it stays cached on an LRU list and is evicted (hash forgotten) only
// when a fresh block is needed and no never-used block is left.
//
// Not thread-safe: owned by one engine thread.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "strata/common/block_hash.h"

namespace strata {

using BlockId = int32_t;

// Published on every commit (stored) and eviction (removed) of a cached block, so a KV index
// elsewhere can stay true.
struct KvCacheEvent {
  // kCleared (from EngineLoop::ResyncKvEvents only): every block reported before it is gone;
  // the kStored events after it list the pool's whole contents.
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind;
  BlockHash hash;
  BlockId block;
  BlockHash parent = kRootBlockHash;  // the chain's previous block
};

struct BlockManagerStats {
  int64_t prefix_queries = 0;  // blocks looked up
  int64_t prefix_hits = 0;     // of which found cached
  int64_t evictions = 0;       // cached blocks whose hash was dropped for reuse
};

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size, bool enable_prefix_caching);

  int num_blocks() const { return static_cast<int>(ref_count_.size()); }
  int block_size() const { return block_size_; }
  // Blocks that Allocate can hand out now (unused + cached with refcount 0).
  int num_free_blocks() const { return num_free_; }
  bool prefix_caching() const { return prefix_caching_; }

  // A block with refcount 1 and no hash; evicts the least recently released cached block if
  // no unused one is left. ResourceExhausted when every block is referenced.
  absl::StatusOr<BlockId> Allocate();
  void Ref(BlockId block);
  // Drops one reference. At zero the block becomes free (cached on the LRU list if committed).
  void Release(BlockId block);
  void ReleaseAll(std::span<const BlockId> blocks);

  // Longest prefix of `hashes` that is cached; each returned block gets one reference.
  std::vector<BlockId> AcquireCachedPrefix(std::span<const BlockHash> hashes);
  // Number of leading `hashes` cached now, without taking references.
  int CountCachedPrefix(std::span<const BlockHash> hashes) const;

  // Records that `block` holds the KV of the block with chain hash `hash`. If another block
  // already holds that hash, the cache keeps the existing one and this block stays private.
  void Commit(BlockId block, BlockHash hash, BlockHash parent = kRootBlockHash);

  int ref_count(BlockId block) const { return ref_count_[block]; }
  // The block caching `hash`, or -1.
  BlockId FindCached(BlockHash hash) const;
  // Every block hash the prefix cache holds now (in no particular order).
  std::vector<BlockHash> CachedHashes() const;
  const BlockManagerStats& stats() const { return stats_; }
  void SetEventListener(std::function<void(const KvCacheEvent&)> listener) {
    listener_ = std::move(listener);
  }

 private:
  static constexpr BlockId kNone = -1;
  void LruPushBack(BlockId block);
  void LruRemove(BlockId block);
  void Uncache(BlockId block);

  int block_size_;
  bool prefix_caching_;
  int num_free_ = 0;
  std::vector<int32_t> ref_count_;
  std::vector<BlockHash> hash_;    // valid if has_hash_
  std::vector<BlockHash> parent_;  // valid if has_hash_
  std::vector<uint8_t> has_hash_;
  std::vector<BlockId> unused_;               // never-committed free blocks (stack)
  std::vector<BlockId> lru_prev_, lru_next_;  // intrusive LRU of cached free blocks
  BlockId lru_head_ = kNone, lru_tail_ = kNone;
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  BlockManagerStats stats_;
  std::function<void(const KvCacheEvent&)> listener_;
};

}  // namespace strata
