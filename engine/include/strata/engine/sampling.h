#pragma once
// Sampling parameters and the host-side sampler.
//
// Order of operations for one logits row (OpenAI / vLLM semantics):
//   1. penalties: repetition (prompt + output tokens, HF rule: positive logits divided,
//      negative multiplied), then frequency (count in output) and presence (in output);
//   2. temperature == 0 -> greedy argmax (ties: lowest id); otherwise divide by temperature;
//   3. top-k, top-p (smallest set with cumulative probability >= top_p), min-p (drop
//      tokens with p < min_p * p_max), then sample from the renormalized distribution.
// Logprobs are those of the model's raw distribution (log_softmax of the unpenalized logits).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "strata/plugin/abi.h"

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
  int logprobs = -1;  // -1: none; N >= 0: the chosen token's logprob and the top N
  bool skip_special_tokens = true;

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

// Deterministic 64-bit generator (xoshiro256**) seeded by splitmix64: the same seed gives the
// same samples on every platform and build.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // [0, 1)

 private:
  uint64_t s_[4];
};

// The device-side form of `params` (strata/plugin/abi.h) with `uniform` 0: the caller sets it
// from the request's generator (one draw per sampled token, only when temperature > 0).
strata_sample_params ToSampleParams(const SamplingParams& params);
// Penalties need the request's token history, which only the host sampler applies: such a
// request's logits must come back to the host.
bool NeedsHostSampling(const SamplingParams& params);

// Samples one token from `logits` (modified in place as scratch). `prompt` and `output` are
// the request's tokens so far, for the penalties.
SampleResult Sample(std::span<float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt, std::span<const int32_t> output, Rng& rng);

}  // namespace strata
