#include "strata/sim/prefix_cache.h"

#include "strata/common/logging.h"

namespace strata::sim {

using router::KvEvent;

int32_t PrefixCache::Match(std::span<const BlockHash> chain) const {
  int32_t n = 0;
  for (BlockHash h : chain) {
    if (!entries_.contains(h)) break;
    ++n;
  }
  return n;
}

void PrefixCache::LruPush(BlockHash hash, Entry& e) {
  uint32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[id] = Node{hash, tail_, kNil};
  if (tail_ != kNil) nodes_[tail_].next = id;
  tail_ = id;
  if (head_ == kNil) head_ = id;
  e.node = id;
  ++lru_size_;
}

void PrefixCache::LruUnlink(Entry& e) {
  const uint32_t id = e.node;
  const Node n = nodes_[id];
  if (n.prev != kNil)
    nodes_[n.prev].next = n.next;
  else
    head_ = n.next;
  if (n.next != kNil)
    nodes_[n.next].prev = n.prev;
  else
    tail_ = n.prev;
  free_nodes_.push_back(id);
  e.node = kNil;
  --lru_size_;
}

void PrefixCache::EvictOldest(std::vector<KvEvent>* events) {
  const BlockHash h = nodes_[head_].hash;
  auto it = entries_.find(h);
  STRATA_CHECK(it != entries_.end() && it->second.refs == 0);
  LruUnlink(it->second);
  entries_.erase(it);
  ++evictions_;
  events->push_back(KvEvent{KvEvent::Kind::kRemoved, h, kRootBlockHash});
}

void PrefixCache::Ref(Entry& e) {
  if (e.refs++ == 0) {
    LruUnlink(e);
    ++referenced_;
  }
}

bool PrefixCache::Acquire(std::span<const BlockHash> chain, int32_t matched, int64_t private_blocks,
                          std::vector<KvEvent>* events) {
  int64_t revived = 0;  // matched blocks that leave the LRU list when referenced
  for (int32_t i = 0; i < matched; ++i) {
    auto it = entries_.find(chain[i]);
    STRATA_CHECK(it != entries_.end());
    if (it->second.refs == 0) ++revived;
  }
  const int64_t never_used = capacity_ - referenced_ - private_ - lru_size_;
  const int64_t evictable = lru_size_ - revived;
  if (private_blocks > never_used + evictable) return false;
  for (int32_t i = 0; i < matched; ++i) Ref(entries_.find(chain[i])->second);
  for (int64_t need = private_blocks - never_used; need > 0; --need) EvictOldest(events);
  private_ += private_blocks;
  return true;
}

void PrefixCache::Commit(std::span<const BlockHash> chain, int32_t from, int32_t to,
                         std::vector<KvEvent>* events) {
  for (int32_t i = from; i < to; ++i) {
    auto [it, inserted] = entries_.try_emplace(chain[i]);
    --private_;
    if (inserted) {
      it->second.refs = 1;
      ++referenced_;
      events->push_back(
          KvEvent{KvEvent::Kind::kStored, chain[i], i == 0 ? kRootBlockHash : chain[i - 1]});
    } else {
      Ref(it->second);
    }
  }
}

void PrefixCache::Release(std::span<const BlockHash> chain, int32_t hashed,
                          int64_t private_blocks) {
  // Tail first, so a chain's root is the newest and is evicted last (like vLLM's free order):
  // evicting a root would make every block after it unmatchable.
  for (int32_t i = hashed - 1; i >= 0; --i) {
    auto it = entries_.find(chain[i]);
    STRATA_CHECK(it != entries_.end() && it->second.refs > 0);
    if (--it->second.refs == 0) {
      --referenced_;
      LruPush(chain[i], it->second);
    }
  }
  private_ -= private_blocks;
  STRATA_CHECK(private_ >= 0);
}

}  // namespace strata::sim
