#pragma once
// Deterministic prompt tokens for trace replay, identical across processes and machines.
//
// Every token is drawn from a stable 64-bit hash (XXH3 with a fixed little-endian byte layout,
// never std::hash) of (seed, kind, id, position), mapped without bias onto the ids of
// [0, vocab_size) that are not reserved (special tokens such as BOS/EOS are never emitted).
//
//   - Block prompts (Mooncake hash_ids): block id b is always the same kTraceBlockTokens-token
//     block, BlockTokens(b). A request's prompt is the concatenation of its blocks, the last one
//     truncated to input_tokens. Two requests sharing their first k block ids share exactly
//     their first k*512 prompt tokens, so trace prefix sharing becomes real prefix sharing.
//   - Unique prompts (Azure, BurstGPT: no prefix information): the first system_prompt_tokens
//     tokens are one shared system prompt (the same for every request); the rest is derived from
//     (seed, request_index), so different requests diverge right after the system prompt. A
//     request shorter than the system prompt gets its first input_tokens tokens.
//
// Thread-safe after construction (all methods are const).
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/replay/trace.h"

namespace strata::replay {

class PromptSynthesizer {
 public:
  // InvalidArgument when vocab_size is not in [1, 2^24], a reserved id is outside
  // [0, vocab_size), every id is reserved, or system_prompt_tokens < 0.
  static absl::StatusOr<PromptSynthesizer> Create(int32_t vocab_size,
                                                  std::vector<int32_t> reserved_ids, uint64_t seed,
                                                  int32_t system_prompt_tokens = 0);

  // The fixed block for `block_id` (kTraceBlockTokens tokens).
  std::vector<int32_t> BlockTokens(uint64_t block_id) const;

  // Concatenated blocks truncated to input_tokens; InvalidArgument unless
  // block_ids.size() == ceil(input_tokens / 512) and input_tokens >= 0.
  absl::StatusOr<std::vector<int32_t>> BlockPrompt(std::span<const uint64_t> block_ids,
                                                   int32_t input_tokens) const;

  // System prompt then tokens unique to request_index; InvalidArgument if input_tokens < 0.
  absl::StatusOr<std::vector<int32_t>> UniquePrompt(uint64_t request_index,
                                                    int32_t input_tokens) const;

  // BlockPrompt when the request has block ids, else UniquePrompt(request_index, ...).
  absl::StatusOr<std::vector<int32_t>> Synthesize(const TraceRequest& request,
                                                  uint64_t request_index) const;

  int32_t system_prompt_tokens() const { return system_prompt_tokens_; }

 private:
  PromptSynthesizer(std::vector<int32_t> allowed, uint64_t seed, int32_t system_prompt_tokens)
      : allowed_(std::move(allowed)), seed_(seed), system_prompt_tokens_(system_prompt_tokens) {}

  int32_t TokenAt(uint8_t kind, uint64_t id, uint64_t position) const;

  std::vector<int32_t> allowed_;  // Sorted ids that may be emitted.
  uint64_t seed_;
  int32_t system_prompt_tokens_;
};

}  // namespace strata::replay
