#pragma once
// The host-side sampler (its parameters: strata/types/sampling.h).
//
// Order of operations for one logits row (OpenAI / vLLM semantics):
//   1. penalties: repetition (prompt + output tokens, HF rule: positive logits divided,
//      negative multiplied), then frequency (count in output) and presence (in output),
//      then logit_bias (added to its tokens' logits);
//   2. temperature == 0 -> greedy argmax (ties: lowest id); otherwise divide by temperature;
//   3. top-k, top-p (smallest set with cumulative probability >= top_p), min-p (drop
//      tokens with p < min_p * p_max), then sample from the renormalized distribution.
// Logprobs are those of the model's raw distribution (log_softmax of the unpenalized logits).
#include <cstdint>
#include <span>

#include "strata/plugin/abi.h"
#include "strata/types/sampling.h"

namespace strata {

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
// Penalties need the request's token history and logit_bias a per-token table, which only the
// host sampler applies (the plugin ABI's `sample` op takes neither): such a request's logits
// must come back to the host. So do those of a structured-output request (params.guided), whose
// token mask the engine applies on the host.
bool NeedsHostSampling(const SamplingParams& params);

// Samples one token from `logits` (modified in place as scratch). `prompt` and `output` are
// the request's tokens so far, for the penalties.
SampleResult Sample(std::span<float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt, std::span<const int32_t> output, Rng& rng);

}  // namespace strata
