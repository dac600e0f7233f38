#include "strata/grammar/token_mask.h"

#include <algorithm>
#include <numeric>

namespace strata::grammar {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::Create(
    std::vector<std::string> token_bytes, const std::vector<bool>& usable) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  const size_t n = token_bytes.size();
  v->usable_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    v->usable_[i] = i < usable.size() && usable[i] && !token_bytes[i].empty();
  }
  v->bytes_ = std::move(token_bytes);
  // Sorted by bytes, the tokens sharing a prefix are adjacent: the trie is built depth-first
  // with one stack of open nodes, already in flat form.
  std::vector<int32_t> order;
  for (size_t i = 0; i < n; ++i) {
    if (v->usable_[i]) order.push_back(static_cast<int32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return v->bytes_[a] < v->bytes_[b] || (v->bytes_[a] == v->bytes_[b] && a < b);
  });
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    std::vector<int32_t> ids;
  };
  std::vector<Node> nodes(1);
  std::vector<int32_t> path = {0};  // path[d]: the node for the first d bytes of `prev`
  std::string prev;
  for (int32_t id : order) {
    const std::string& b = v->bytes_[id];
    size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < b.size(); ++d) {
      const int32_t child = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      nodes[path.back()].children.emplace_back(static_cast<uint8_t>(b[d]), child);
      path.push_back(child);
    }
    nodes[path.back()].ids.push_back(id);
    prev = b;
  }
  v->child_begin_.push_back(0);
  v->ids_begin_.push_back(0);
  for (const Node& node : nodes) {
    for (const auto& [byte, child] : node.children) {
      v->child_byte_.push_back(byte);
      v->child_node_.push_back(child);
    }
    v->ids_.insert(v->ids_.end(), node.ids.begin(), node.ids.end());
    v->child_begin_.push_back(static_cast<uint32_t>(v->child_byte_.size()));
    v->ids_begin_.push_back(static_cast<uint32_t>(v->ids_.size()));
  }
  return v;
}

TokenMask TokenVocabulary::Walk(const Grammar& grammar, int32_t state) const {
  TokenMask mask(MaskWords(size()), 0);
  std::vector<std::pair<int32_t, int32_t>> stack = {{0, state}};  // (trie node, grammar state)
  while (!stack.empty()) {
    const auto [node, s] = stack.back();
    stack.pop_back();
    for (uint32_t c = child_begin_[node]; c < child_begin_[node + 1]; ++c) {
      const int32_t next = grammar.Next(s, child_byte_[c]);
      if (next == Grammar::kDead) continue;
      const int32_t child = child_node_[c];
      for (uint32_t i = ids_begin_[child]; i < ids_begin_[child + 1]; ++i) MaskSet(mask, ids_[i]);
      if (child_begin_[child] != child_begin_[child + 1]) stack.emplace_back(child, next);
    }
  }
  return mask;
}

TokenMask TokenVocabulary::BruteForce(const Grammar& grammar, int32_t state) const {
  TokenMask mask(MaskWords(size()), 0);
  for (int32_t id = 0; id < size(); ++id) {
    if (usable_[id] && grammar.Advance(state, bytes_[id]) != Grammar::kDead) MaskSet(mask, id);
  }
  return mask;
}

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> grammar,
                         std::shared_ptr<const TokenVocabulary> vocab, size_t max_cached)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), max_cached_(max_cached) {}

std::shared_ptr<const TokenMask> TokenMasker::Mask(int32_t state) {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = masks_.find(state); it != masks_.end()) return it->second;
  }
  // Computed outside the lock: two threads may both compute one state's mask; both are equal.
  auto mask = std::make_shared<const TokenMask>(vocab_->Walk(*grammar_, state));
  absl::MutexLock lock(&mu_);
  if (masks_.size() < max_cached_) masks_.try_emplace(state, mask);
  return mask;
}

int32_t TokenMasker::Advance(int32_t state, int32_t token) const {
  if (token < 0 || token >= vocab_->size() || !vocab_->usable(token)) return Grammar::kDead;
  return grammar_->Advance(state, vocab_->bytes(token));
}

absl::StatusOr<std::shared_ptr<TokenMasker>> MaskerCache::Get(const GuidedDecoding& spec) {
  std::string key(1, static_cast<char>(spec.kind));
  key += spec.spec;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
  }
  auto grammar = Grammar::Compile(spec);
  if (!grammar.ok()) return grammar.status();
  auto masker = std::make_shared<TokenMasker>(*std::move(grammar), vocab_);
  absl::MutexLock lock(&mu_);
  lru_.emplace_front(std::move(key), masker);
  if (lru_.size() > capacity_) lru_.pop_back();
  return masker;
}

}  // namespace strata::grammar
