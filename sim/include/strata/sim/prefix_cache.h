#pragma once
// A simulated worker's G1 prefix cache: `capacity` KV blocks, each either
//   - hashed: a full prompt block known by its chain hash, shared by every request whose prompt
//     starts with that chain, reference-counted; unreferenced hashed blocks stay resident (they
//     are the prefix cache) on an LRU list and are evicted oldest first when space is needed;
//   - private: blocks a request holds that no one else can reuse (its partial last prompt
//     block, its output tokens, and prompt blocks still being computed), counted, not named.
// Every block that becomes resident or is evicted is reported as a KvEvent (the same events a
// real worker's block manager publishes), appended to the caller's vector.
//
// Not thread-safe: one simulated worker owns it.
#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "strata/router/kv_index.h"

namespace strata::sim {

class PrefixCache {
 public:
  explicit PrefixCache(int64_t capacity) : capacity_(capacity) {}

  int64_t capacity() const { return capacity_; }
  // Blocks held by requests (referenced hashed blocks + private blocks).
  int64_t in_use() const { return referenced_ + private_; }
  // Blocks that could be handed out now: never used, or cached and unreferenced.
  int64_t available() const { return capacity_ - in_use(); }
  int64_t resident_hashed() const { return static_cast<int64_t>(entries_.size()); }
  int64_t evictions() const { return evictions_; }

  // Length of the longest prefix of `chain` resident here.
  int32_t Match(std::span<const BlockHash> chain) const;

  // Takes a reference on chain[0..matched) (which must be resident: Match's answer) and
  // allocates `private_blocks`, evicting unreferenced blocks in LRU order as needed. Returns
  // false, changing nothing, when the blocks do not fit.
  bool Acquire(std::span<const BlockHash> chain, int32_t matched, int64_t private_blocks,
               std::vector<router::KvEvent>* events);

  // Turns chain[from..to) from private blocks of the caller into hashed, referenced blocks
  // (their KV is now complete). A block some other request committed meanwhile is shared
  // instead, and the caller's private copy is freed.
  void Commit(std::span<const BlockHash> chain, int32_t from, int32_t to,
              std::vector<router::KvEvent>* events);

  // Drops the caller's references on chain[0..hashed) and frees `private_blocks`.
  void Release(std::span<const BlockHash> chain, int32_t hashed, int64_t private_blocks);

 private:
  static constexpr uint32_t kNil = 0xffffffffu;
  struct Entry {
    int32_t refs = 0;
    uint32_t node = kNil;  // LRU node while unreferenced
  };
  struct Node {
    BlockHash hash = 0;
    uint32_t prev = kNil, next = kNil;
  };
  void LruPush(BlockHash hash, Entry& e);  // newest end
  void LruUnlink(Entry& e);
  void EvictOldest(std::vector<router::KvEvent>* events);
  void Ref(Entry& e);

  int64_t capacity_;
  int64_t referenced_ = 0;  // hashed blocks with refs > 0
  int64_t private_ = 0;
  int64_t evictions_ = 0;
  absl::flat_hash_map<BlockHash, Entry> entries_;
  std::vector<Node> nodes_;  // slab of LRU nodes
  std::vector<uint32_t> free_nodes_;
  uint32_t head_ = kNil, tail_ = kNil;  // oldest, newest
  int64_t lru_size_ = 0;
};

}  // namespace strata::sim
