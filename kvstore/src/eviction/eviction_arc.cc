// "arc": Adaptive Replacement Cache (Megiddo & Modha, FAST '03), adapted to the tier-driven
// interface (the tier asks for a victim before inserting; the policy never evicts by itself).
//
//   T1  keys used once since they entered (LRU order)     B1  ghost keys evicted from T1
//   T2  keys used at least twice (LRU order)              B2  ghost keys evicted from T2
//
// `target_` (ARC's p) is the share of the capacity T1 should get. A key inserted while in B1
// means T1 was too small: target grows; in B2: target shrinks; either way the key enters T2.
// Victim takes T1's LRU key when T1 exceeds the target (or T2 is empty), else T2's, stepping past
// unevictable keys (which keep their place) and falling back to the other list. Ghost lists are
// bounded as in ARC: |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c.
#include <algorithm>
#include <list>

#include "absl/container/flat_hash_map.h"
#include "eviction_internal.h"

namespace strata::kvstore::internal {
namespace {

enum class Where : uint8_t { kT1, kT2, kB1, kB2 };

class ArcPolicy final : public EvictionPolicy {
 public:
  explicit ArcPolicy(int64_t capacity) : capacity_(capacity) {}

  std::string_view name() const override { return "arc"; }

  void Insert(BlockHash key) override {
    auto it = index_.find(key);
    if (it != index_.end() && (it->second.where == Where::kT1 || it->second.where == Where::kT2)) {
      return Touch(key);
    }
    if (it == index_.end()) {
      MoveTo(key, Where::kT1);
    } else {
      const auto b1 = static_cast<double>(List(Where::kB1).size());
      const auto b2 = static_cast<double>(List(Where::kB2).size());
      if (it->second.where == Where::kB1) {
        target_ =
            std::min<double>(static_cast<double>(capacity_), target_ + std::max(b2 / b1, 1.0));
      } else {
        target_ = std::max(0.0, target_ - std::max(b1 / b2, 1.0));
      }
      MoveTo(key, Where::kT2);
    }
    TrimGhosts();
  }

  void Touch(BlockHash key) override {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.where == Where::kB1 || it->second.where == Where::kB2) {
      return;
    }
    MoveTo(key, Where::kT2);
  }

  void Erase(BlockHash key) override {
    auto it = index_.find(key);
    if (it == index_.end() || it->second.where == Where::kB1 || it->second.where == Where::kB2) {
      return;
    }
    if (pending_ghost_ == key) {
      pending_ghost_.reset();
      MoveTo(key, it->second.where == Where::kT1 ? Where::kB1 : Where::kB2);
      TrimGhosts();
      return;
    }
    List(it->second.where).erase(it->second.it);
    index_.erase(it);
  }

  std::optional<BlockHash> Victim(const std::function<bool(BlockHash)>& evictable) override {
    pending_ghost_.reset();
    const auto t1 = static_cast<double>(List(Where::kT1).size());
    const bool t1_first = t1 > 0 && (t1 > target_ || List(Where::kT2).empty());
    std::optional<BlockHash> victim =
        OldestEvictable(t1_first ? Where::kT1 : Where::kT2, evictable);
    if (!victim) victim = OldestEvictable(t1_first ? Where::kT2 : Where::kT1, evictable);
    pending_ghost_ = victim;
    return victim;
  }

  int64_t size() const override {
    return static_cast<int64_t>(lists_[0].size() + lists_[1].size());
  }

 private:
  struct Node {
    Where where;
    std::list<BlockHash>::iterator it;
  };

  std::list<BlockHash>& List(Where w) { return lists_[static_cast<int>(w)]; }

  // Puts `key` at the MRU end (front) of list `to`, taking it out of wherever it was.
  void MoveTo(BlockHash key, Where to) {
    auto [it, inserted] = index_.try_emplace(key);
    if (!inserted) List(it->second.where).erase(it->second.it);
    List(to).push_front(key);
    it->second = Node{.where = to, .it = List(to).begin()};
  }

  std::optional<BlockHash> OldestEvictable(Where w,
                                           const std::function<bool(BlockHash)>& evictable) {
    return internal::OldestEvictable(List(w), evictable);
  }

  void DropOldest(Where w) {
    std::list<BlockHash>& list = List(w);
    index_.erase(list.back());
    list.pop_back();
  }

  void TrimGhosts() {
    auto n = [this](Where w) { return static_cast<int64_t>(List(w).size()); };
    while (!List(Where::kB1).empty() && n(Where::kT1) + n(Where::kB1) > capacity_) {
      DropOldest(Where::kB1);
    }
    while (n(Where::kT1) + n(Where::kT2) + n(Where::kB1) + n(Where::kB2) > 2 * capacity_) {
      DropOldest(List(Where::kB2).empty() ? Where::kB1 : Where::kB2);
    }
  }

  const int64_t capacity_;
  double target_ = 0;              // ARC's p: T1's target size
  std::list<BlockHash> lists_[4];  // by Where; front = most recent
  absl::flat_hash_map<BlockHash, Node> index_;
  // The last victim nominated: its Erase moves the key to its ghost list.
  std::optional<BlockHash> pending_ghost_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewArcPolicy(int64_t capacity_blocks) {
  return std::make_unique<ArcPolicy>(capacity_blocks);
}

}  // namespace strata::kvstore::internal
