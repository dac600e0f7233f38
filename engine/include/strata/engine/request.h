#pragma once
// One generation request as the engine tracks it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/common/block_hash.h"
#include "strata/engine/block_manager.h"
#include "strata/engine/sampling.h"
#include "strata/grammar/token_mask.h"
#include "strata/text/tokenizer.h"
#include "strata/types/finish_reason.h"

namespace strata {

struct Request {
  enum class State { kWaiting, kRunning, kFinished };

  std::string id;
  uint64_t arrival = 0;         // admission order (FCFS priority)
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int32_t prompt_len = 0;
  int32_t max_total_tokens = 0;  // prompt_len + max_tokens, clipped to the model's context
  SamplingParams params;
  std::unique_ptr<Rng> rng;
  State state = State::kWaiting;
  FinishReason finish = FinishReason::kNone;
  std::string stop_reason;  // the stop string or token that ended it

  // KV cache state.
  std::vector<BlockId> blocks;
  int32_t num_computed = 0;             // tokens whose KV is in `blocks`
  int32_t num_cached_prompt = 0;        // prompt tokens served from the prefix cache (last admit)
  std::vector<BlockHash> block_hashes;  // chain hashes of the committed full blocks
  BlockHasher hasher;  // the scheduler's, salted with params.cache_salt (set when added)
  int num_preemptions = 0;
  bool hold_blocks = false;  // prefill-only: keep the blocks referenced after finishing

  // Structured output (params.guided): the constraint's masks and the automaton's state after
  // the output so far.
  std::shared_ptr<grammar::TokenMasker> grammar;
  int32_t grammar_state = 0;

  // Detokenization and stop strings.
  std::unique_ptr<StreamDecoder> detok;
  std::string text;         // all generated text (stop string removed)
  size_t text_emitted = 0;  // bytes of `text` already returned to the caller

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_output() const { return num_tokens() - prompt_len; }
  std::span<const int32_t> prompt() const { return {tokens.data(), size_t(prompt_len)}; }
  std::span<const int32_t> output() const {
    return {tokens.data() + prompt_len, size_t(num_output())};
  }
};

}  // namespace strata
