// "lru": least recently used first. A list ordered by recency (front = most recent) plus an
// index into it; every operation is O(1) except Victim, which walks past unevictable keys.
#include <list>

#include "absl/container/flat_hash_map.h"
#include "eviction_internal.h"

namespace strata::kvstore::internal {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }

  void Insert(BlockHash key) override {
    if (index_.contains(key)) return Touch(key);
    order_.push_front(key);
    index_.emplace(key, order_.begin());
  }

  void Touch(BlockHash key) override {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.splice(order_.begin(), order_, it->second);  // iterators stay valid
  }

  void Erase(BlockHash key) override {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  std::optional<BlockHash> Victim(const std::function<bool(BlockHash)>& evictable) override {
    return internal::OldestEvictable(order_, evictable);
  }

  int64_t size() const override { return static_cast<int64_t>(index_.size()); }

 private:
  std::list<BlockHash> order_;
  absl::flat_hash_map<BlockHash, std::list<BlockHash>::iterator> index_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewLruPolicy(int64_t /*capacity_blocks*/) {
  return std::make_unique<LruPolicy>();
}

}  // namespace strata::kvstore::internal
