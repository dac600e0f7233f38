#pragma once
// A request's sampling parameters and one sampled token with its logprobs: what a client asks
// for and what it gets back, shared by the engine's sampler (strata/engine/sampling.h), the
// control-plane messages and the OpenAI front end.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "strata/types/guided.h"

namespace strata {

struct SamplingParams {
  int max_tokens = 16;
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // <= 0: disabled
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::optional<uint64_t> seed;  // reproducible sampling when set
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // extra stop tokens (included in token output)
  bool ignore_eos = false;
  // Until this many tokens are generated, EOS and stop_token_ids cannot be sampled and stop
  // strings do not end the request.
  int min_tokens = 0;
  // Keep the matched stop string (or the stop token's text) at the end of the output text.
  bool include_stop_str_in_output = false;
  int logprobs = -1;  // -1: none; N >= 0: the chosen token's logprob and the top N
  // OpenAI logit_bias: (token id, bias in [-100, 100]) pairs, each id at most once, at most
  // kMaxLogitBias of them; the bias is added to that token's logit after the penalties and
  // before temperature and sampling. Logprobs stay those of the unbiased distribution.
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool skip_special_tokens = true;
  // Structured output: the output follows this constraint (token masks from its grammar).
  GuidedDecoding guided;
  // Not a sampling parameter, but it travels with them to every worker of the request: mixed
  // into the request's block hashes, so only requests with the same salt share cached KV
  // (strata/common/block_hash.h). Empty: no salt. At most kMaxCacheSaltBytes.
  std::string cache_salt;

  static constexpr size_t kMaxCacheSaltBytes = 256;
  static constexpr size_t kMaxLogitBias = 300;
  static constexpr float kMaxLogitBiasValue = 100.0f;

  // InvalidArgument naming the parameter when out of range.
  absl::Status Validate(int vocab_size) const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token;
  float logprob = 0.0f;           // of the chosen token (when logprobs >= 0)
  std::vector<TokenLogprob> top;  // top `logprobs` tokens, descending
};

}  // namespace strata
