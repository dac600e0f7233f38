#pragma once
// Token masks: which vocabulary tokens keep a grammar's output alive from a given state.
//
// A mask is a plain bitmask over the vocabulary, 32 tokens per uint32_t word (token t is bit
// t % 32 of word t / 32), so it can be copied to a device and applied to logits there as well
// as on the host. A mask holds the tokens whose bytes the grammar can read from the state; the
// stop tokens (EOS, stop_token_ids) are the caller's to add where the state is accepting.
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "strata/grammar/grammar.h"
#include "strata/types/guided.h"

namespace strata::grammar {

using TokenMask = std::vector<uint32_t>;

inline size_t MaskWords(int32_t vocab_size) { return (static_cast<size_t>(vocab_size) + 31) / 32; }
inline bool MaskHas(const TokenMask& mask, int32_t token) {
  return (mask[static_cast<size_t>(token) >> 5] >> (token & 31)) & 1u;
}
inline void MaskSet(TokenMask& mask, int32_t token) {
  mask[static_cast<size_t>(token) >> 5] |= 1u << (token & 31);
}

// A vocabulary's token byte strings in a trie, so one walk covers every token sharing a
// prefix. Immutable and thread-safe.
class TokenVocabulary {
 public:
  // `token_bytes[id]`: the bytes token `id` decodes to. Tokens with `usable[id]` false (special
  // tokens) and empty ones are never in a mask.
  static std::shared_ptr<const TokenVocabulary> Create(std::vector<std::string> token_bytes,
                                                       const std::vector<bool>& usable);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool usable(int32_t id) const { return usable_[id] != 0; }

  // The tokens allowed from `state`, by a walk of the trie that stops at dead prefixes.
  TokenMask Walk(const Grammar& grammar, int32_t state) const;
  // The same set by running every token's bytes through the grammar (tests, benchmarks).
  TokenMask BruteForce(const Grammar& grammar, int32_t state) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> usable_;
  // Trie in flat arrays: node n's children are child_[child_begin_[n] .. child_begin_[n+1]),
  // the tokens ending at n are ids_[ids_begin_[n] .. ids_begin_[n+1]). Node 0 is the root.
  std::vector<uint32_t> child_begin_, ids_begin_;
  std::vector<uint8_t> child_byte_;
  std::vector<int32_t> child_node_, ids_;
};

// One grammar over one vocabulary, with the masks of the states met so far cached (at most
// `max_cached` of them; beyond that a mask is computed each time it is asked for).
// Thread-safe.
class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const Grammar> grammar,
              std::shared_ptr<const TokenVocabulary> vocab, size_t max_cached = 4096);

  const Grammar& grammar() const { return *grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  std::shared_ptr<const TokenMask> Mask(int32_t state);
  // The state after token `token`'s bytes, or Grammar::kDead (special tokens: always dead).
  int32_t Advance(int32_t state, int32_t token) const;

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t max_cached_;
  absl::Mutex mu_;
  absl::flat_hash_map<int32_t, std::shared_ptr<const TokenMask>> masks_ ABSL_GUARDED_BY(mu_);
};

// Compiled constraints by spec over one vocabulary, so requests with the same schema share
// the automaton and its masks; at most `capacity` entries, the least recently used dropped
// (requests keep theirs alive). Thread-safe.
class MaskerCache {
 public:
  MaskerCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity = 64)
      : vocab_(std::move(vocab)), capacity_(capacity) {}

  // InvalidArgument from Grammar::Compile.
  absl::StatusOr<std::shared_ptr<TokenMasker>> Get(const GuidedDecoding& spec);

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  absl::Mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<TokenMasker>>> lru_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::grammar
