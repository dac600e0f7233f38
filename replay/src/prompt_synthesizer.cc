#include "strata/replay/prompt_synthesizer.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace strata::replay {
namespace {

constexpr int32_t kMaxVocab = 1 << 24;
constexpr uint8_t kBlockKind = 'B';
constexpr uint8_t kSystemKind = 'S';
constexpr uint8_t kUniqueKind = 'U';

void PutLe64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

absl::StatusOr<PromptSynthesizer> PromptSynthesizer::Create(int32_t vocab_size,
                                                            std::vector<int32_t> reserved_ids,
                                                            uint64_t seed,
                                                            int32_t system_prompt_tokens) {
  if (vocab_size < 1 || vocab_size > kMaxVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size must be in [1, ", kMaxVocab, "], got ", vocab_size));
  }
  if (system_prompt_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("system_prompt_tokens must be >= 0, got ", system_prompt_tokens));
  }
  std::vector<bool> reserved(vocab_size, false);
  for (int32_t id : reserved_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("reserved id ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    reserved[id] = true;
  }
  std::vector<int32_t> allowed;
  allowed.reserve(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (!reserved[id]) allowed.push_back(id);
  }
  if (allowed.empty()) {
    return absl::InvalidArgumentError("every token id of the vocabulary is reserved");
  }
  return PromptSynthesizer(std::move(allowed), seed, system_prompt_tokens);
}

int32_t PromptSynthesizer::TokenAt(uint8_t kind, uint64_t id, uint64_t position) const {
  uint8_t bytes[17];
  bytes[0] = kind;
  PutLe64(bytes + 1, id);
  PutLe64(bytes + 9, position);
  const uint64_t h = XXH3_64bits_withSeed(bytes, sizeof(bytes), seed_);
  // Multiply-shift maps h onto [0, allowed_.size()) with negligible bias and no modulo.
  const uint64_t index =
      static_cast<uint64_t>((static_cast<unsigned __int128>(h) * allowed_.size()) >> 64);
  return allowed_[index];
}

std::vector<int32_t> PromptSynthesizer::BlockTokens(uint64_t block_id) const {
  std::vector<int32_t> tokens(kTraceBlockTokens);
  for (int32_t p = 0; p < kTraceBlockTokens; ++p) tokens[p] = TokenAt(kBlockKind, block_id, p);
  return tokens;
}

absl::StatusOr<std::vector<int32_t>> PromptSynthesizer::BlockPrompt(
    std::span<const uint64_t> block_ids, int32_t input_tokens) const {
  if (input_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("input_tokens is negative: ", input_tokens));
  }
  const size_t blocks =
      (static_cast<size_t>(input_tokens) + kTraceBlockTokens - 1) / kTraceBlockTokens;
  if (block_ids.size() != blocks) {
    return absl::InvalidArgumentError(absl::StrCat(block_ids.size(), " block ids given for ",
                                                   input_tokens, " tokens; expected ", blocks));
  }
  std::vector<int32_t> tokens(input_tokens);
  for (int32_t i = 0; i < input_tokens; ++i) {
    tokens[i] = TokenAt(kBlockKind, block_ids[i / kTraceBlockTokens], i % kTraceBlockTokens);
  }
  return tokens;
}

absl::StatusOr<std::vector<int32_t>> PromptSynthesizer::UniquePrompt(uint64_t request_index,
                                                                     int32_t input_tokens) const {
  if (input_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("input_tokens is negative: ", input_tokens));
  }
  std::vector<int32_t> tokens(input_tokens);
  for (int32_t i = 0; i < input_tokens; ++i) {
    tokens[i] = i < system_prompt_tokens_ ? TokenAt(kSystemKind, 0, i)
                                          : TokenAt(kUniqueKind, request_index, i);
  }
  return tokens;
}

absl::StatusOr<std::vector<int32_t>> PromptSynthesizer::Synthesize(const TraceRequest& request,
                                                                   uint64_t request_index) const {
  if (!request.block_ids.empty()) return BlockPrompt(request.block_ids, request.input_tokens);
  return UniquePrompt(request_index, request.input_tokens);
}

}  // namespace strata::replay
