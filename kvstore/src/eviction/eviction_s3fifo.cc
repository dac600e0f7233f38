// "s3-fifo": S3-FIFO (Yang et al., SOSP '23), a scan-resistant policy built from FIFO queues.
//
//   small  FIFO of ~10% of capacity where new keys enter;
//   main   FIFO of the rest, for keys that proved themselves;
//   ghost  FIFO of keys recently evicted from small (keys only, no data), as many as main holds.
//
// Each key has a 2-bit use count (saturating at 3) bumped by Touch. When room is needed and
// small holds at least its share, small's oldest key moves to main if it was used since it came
// in, else it is the victim (and its key goes to ghost when the tier erases it). Otherwise main's
// oldest key is reinserted at main's head with its count decremented while the count is
// positive, else it is the victim. A key inserted while in ghost goes straight to main: it was
// evicted too early once. A one-pass scan therefore only churns small and never flushes main.
//
// Victim honours `evictable` by stepping past keys it may not drop; those keep their place.
#include <algorithm>
#include <list>

#include "absl/container/flat_hash_map.h"
#include "eviction_internal.h"

namespace strata::kvstore::internal {
namespace {

constexpr uint8_t kMaxFreq = 3;
// A key in small moves to main when used at least this often after entering.
constexpr uint8_t kPromoteFreq = 1;

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(int64_t capacity)
      : small_target_(std::max<int64_t>(1, capacity / 10)),
        ghost_capacity_(std::max<int64_t>(1, capacity - small_target_)) {}

  std::string_view name() const override { return "s3-fifo"; }

  void Insert(BlockHash key) override {
    if (index_.contains(key)) return Touch(key);
    auto ghost = ghost_index_.find(key);
    if (ghost != ghost_index_.end()) {
      ghost_.erase(ghost->second);
      ghost_index_.erase(ghost);
      main_.push_front(key);
      index_.emplace(key, Node{.in_main = true, .freq = 0, .it = main_.begin()});
      return;
    }
    small_.push_front(key);
    index_.emplace(key, Node{.in_main = false, .freq = 0, .it = small_.begin()});
  }

  void Touch(BlockHash key) override {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    it->second.freq = std::min<uint8_t>(kMaxFreq, it->second.freq + 1);
  }

  void Erase(BlockHash key) override {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    const bool from_small = !it->second.in_main;
    (from_small ? small_ : main_).erase(it->second.it);
    index_.erase(it);
    if (from_small && pending_ghost_ == key) AddGhost(key);
    if (pending_ghost_ == key) pending_ghost_.reset();
  }

  std::optional<BlockHash> Victim(const std::function<bool(BlockHash)>& evictable) override {
    pending_ghost_.reset();
    const bool small_first = static_cast<int64_t>(small_.size()) >= small_target_ || main_.empty();
    std::optional<BlockHash> victim =
        small_first ? VictimFromSmall(evictable) : VictimFromMain(evictable);
    if (!victim) victim = small_first ? VictimFromMain(evictable) : VictimFromSmall(evictable);
    return victim;
  }

  int64_t size() const override { return static_cast<int64_t>(index_.size()); }

 private:
  struct Node {
    bool in_main = false;
    uint8_t freq = 0;
    std::list<BlockHash>::iterator it;
  };

  // Walks small from its oldest key; `next` is the element after the one examined, which stays
  // valid when the examined one is spliced into main.
  std::optional<BlockHash> VictimFromSmall(const std::function<bool(BlockHash)>& evictable) {
    auto next = small_.end();
    while (next != small_.begin()) {
      auto cur = std::prev(next);
      Node& node = index_.find(*cur)->second;
      if (node.freq >= kPromoteFreq) {
        main_.splice(main_.begin(), small_, cur);
        node.in_main = true;
        node.freq = 0;
        continue;
      }
      if (evictable(*cur)) {
        pending_ghost_ = *cur;
        return *cur;
      }
      next = cur;
    }
    return std::nullopt;
  }

  // Walks main from its oldest key, giving used keys another round (count decremented). Every
  // reinsertion lowers a count, so the walk ends.
  std::optional<BlockHash> VictimFromMain(const std::function<bool(BlockHash)>& evictable) {
    auto next = main_.end();
    while (next != main_.begin()) {
      auto cur = std::prev(next);
      Node& node = index_.find(*cur)->second;
      if (node.freq > 0) {
        --node.freq;
        if (cur != main_.begin()) main_.splice(main_.begin(), main_, cur);
        continue;
      }
      if (evictable(*cur)) return *cur;
      next = cur;
    }
    return std::nullopt;
  }

  void AddGhost(BlockHash key) {
    ghost_.push_front(key);
    ghost_index_[key] = ghost_.begin();
    while (static_cast<int64_t>(ghost_.size()) > ghost_capacity_) {
      ghost_index_.erase(ghost_.back());
      ghost_.pop_back();
    }
  }

  const int64_t small_target_;
  const int64_t ghost_capacity_;
  std::list<BlockHash> small_;  // front = newest
  std::list<BlockHash> main_;   // front = newest
  std::list<BlockHash> ghost_;  // front = newest
  absl::flat_hash_map<BlockHash, Node> index_;
  absl::flat_hash_map<BlockHash, std::list<BlockHash>::iterator> ghost_index_;
  // The last victim nominated from small: its Erase sends the key to ghost.
  std::optional<BlockHash> pending_ghost_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(int64_t capacity_blocks) {
  return std::make_unique<S3FifoPolicy>(capacity_blocks);
}

}  // namespace strata::kvstore::internal
