#pragma once
// Eviction policies for the KV tiers, selected by name from config ("lru", "s3-fifo", "arc",
// "w-tinylfu", "prefix-tinylfu", "adaptive-tinylfu", "ghost-lru"; docs/kvstore.md compares
// their hit rates against Belady's optimum).
//
// A policy tracks the keys a tier holds and answers "which one goes next". It never owns data
// and never evicts by itself: the tier calls Victim() when it needs room, skips keys it cannot
// drop now (leased), and calls Erase() for what it dropped. Capacity is in blocks (every tier
// stores fixed-size blocks).
//
// Thread-safety: none; the owning tier serializes calls under its own lock.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/common/block_hash.h"

namespace strata::kvstore {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;

  // A key entered the tier (it was not tracked).
  virtual void Insert(BlockHash key) = 0;
  // Like Insert, for a key whose block chain-follows `parent` (the block before it in the
  // prompt; a block is only reusable while its whole prefix is). Prefix-aware policies use the
  // link; the default ignores it.
  virtual void InsertChild(BlockHash key, BlockHash parent) {
    (void)parent;
    Insert(key);
  }
  // A tracked key was used (read hit, or a Put of a present block).
  virtual void Touch(BlockHash key) = 0;
  // A tracked key left the tier (evicted, erased, or found corrupt). No-op if untracked.
  virtual void Erase(BlockHash key) = 0;
  // The next key to evict among tracked keys for which `evictable(key)` is true, without
  // removing it; nullopt when there is none. Skipped keys keep their position.
  virtual std::optional<BlockHash> Victim(const std::function<bool(BlockHash)>& evictable) = 0;
  virtual int64_t size() const = 0;  // tracked keys
};

// A policy for a tier of `capacity_blocks` blocks. InvalidArgument for an unknown name
// (the message lists the known ones) or capacity_blocks <= 0.
absl::StatusOr<std::unique_ptr<EvictionPolicy>> CreateEvictionPolicy(std::string_view name,
                                                                     int64_t capacity_blocks);
// Names registered, sorted ("lru", "s3-fifo", ...).
std::vector<std::string> EvictionPolicyNames();

// Registration (in-process extension point): a policy file registers its factory at static
// initialization with
//   static const bool kRegistered = RegisterEvictionPolicy("name", factory);
using EvictionPolicyFactory =
    std::function<std::unique_ptr<EvictionPolicy>(int64_t capacity_blocks)>;
// True when `name` is new; false when it replaced an earlier registration.
bool RegisterEvictionPolicy(std::string name, EvictionPolicyFactory factory);

}  // namespace strata::kvstore
