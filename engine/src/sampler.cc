#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "strata/engine/sampling.h"
#include "strata/plugin_common/sampling.h"

namespace strata {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void ApplyPenalties(std::span<float> logits, const SamplingParams& p,
                    std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const int vocab = static_cast<int>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(vocab, 0);
    for (auto* span : {&prompt, &output}) {
      for (int32_t t : *span) {
        if (t >= 0 && t < vocab) seen[t] = 1;
      }
    }
    for (int t = 0; t < vocab; ++t) {
      if (!seen[t]) continue;
      logits[t] =
          logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    absl::flat_hash_map<int32_t, int> counts;
    for (int32_t t : output) {
      if (t >= 0 && t < vocab) ++counts[t];
    }
    for (const auto& [t, c] : counts) {
      logits[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
  }
  for (const auto& [t, bias] : p.logit_bias) {
    if (t >= 0 && t < vocab) logits[t] += bias;
  }
}

}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = SplitMix64(seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

SampleResult Sample(std::span<float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt, std::span<const int32_t> output, Rng& rng) {
  std::vector<float> raw;
  if (params.logprobs >= 0) raw.assign(logits.begin(), logits.end());
  ApplyPenalties(logits, params, prompt, output);
  const int64_t vocab = static_cast<int64_t>(logits.size());
  SampleResult result{};
  // The rule is the plugin ABI's `sample` op (plugin_common), so host and device sampling agree.
  strata_sample_params p = ToSampleParams(params);
  if (params.temperature != 0.0f) p.uniform = rng.Uniform();
  result.token = plugin_common::SampleRow(logits.data(), vocab, p);
  if (params.logprobs >= 0) {
    const int n = static_cast<int>(std::min<int64_t>(params.logprobs, vocab));
    std::vector<int32_t> ids(n);
    std::vector<float> lps(n);
    plugin_common::RowLogprobs(raw.data(), vocab, result.token, n, &result.logprob, ids.data(),
                               lps.data());
    for (int i = 0; i < n; ++i) result.top.push_back({ids[i], lps[i]});
  }
  return result;
}

strata_sample_params ToSampleParams(const SamplingParams& params) {
  strata_sample_params p{};
  p.temperature = params.temperature;
  p.top_k = params.top_k;
  p.top_p = params.top_p;
  p.min_p = params.min_p;
  p.num_logprobs = params.logprobs;
  return p;
}

bool NeedsHostSampling(const SamplingParams& params) {
  return params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
         params.presence_penalty != 0.0f || !params.logit_bias.empty();
}

}  // namespace strata
