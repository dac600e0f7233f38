#pragma once
// The sampling rule of the ABI's `sample` op (strata_sample_params in strata/plugin/abi.h),
// for one logits row on the host: the engine's host sampler and the CPU plugin both call these,
// and a device plugin's kernel must agree with them (the conformance suite compares).
#include <cstdint>

#include "strata/plugin/abi.h"

namespace strata::plugin_common {

// Argmax of a row (ties: the lowest id).
int32_t ArgmaxRow(const float* logits, int64_t vocab);

// One draw by the rule for `p` (temperature, top_k, top_p, min_p, uniform); greedy when
// p.temperature == 0. `logits` is scratch: divided by the temperature in place.
int32_t SampleRow(float* logits, int64_t vocab, const strata_sample_params& p);

// log_softmax of `raw`: the log-probability of `token` into *chosen and, for n > 0, the top n
// (descending, ties: the lowest id) into top_ids[0..n) / top_logprobs[0..n).
void RowLogprobs(const float* raw, int64_t vocab, int32_t token, int n, float* chosen,
                 int32_t* top_ids, float* top_logprobs);

}  // namespace strata::plugin_common
