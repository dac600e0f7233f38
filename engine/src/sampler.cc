#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "strata/engine/sampling.h"

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
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// log_softmax of the raw logits, then the chosen token and the top n.
void FillLogprobs(std::span<const float> raw, int n, SampleResult& result) {
  const float max = *std::max_element(raw.begin(), raw.end());
  double sum = 0;
  for (float v : raw) sum += std::exp(static_cast<double>(v - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  result.logprob = raw[result.token] - log_z;
  if (n <= 0) return;
  std::vector<int32_t> idx(raw.size());
  std::iota(idx.begin(), idx.end(), 0);
  n = std::min<int>(n, static_cast<int>(raw.size()));
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  for (int i = 0; i < n; ++i) result.top.push_back({idx[i], raw[idx[i]] - log_z});
}

// Candidates sorted by descending logit, truncated by top-k / top-p / min-p.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> probs;  // normalized over ids
};

Candidates Truncate(std::span<const float> logits, const SamplingParams& p) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  int keep = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  ids.resize(keep);
  std::vector<double> probs(keep);
  const double max = logits[ids[0]];
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += probs[i] = std::exp(logits[ids[i]] - max);
  for (double& v : probs) v /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    int n = 0;
    while (n < keep) {
      cum += probs[n++];
      if (cum >= p.top_p) break;
    }
    keep = std::max(n, 1);
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * probs[0];
    int n = 1;
    while (n < keep && probs[n] >= threshold) ++n;
    keep = n;
  }
  ids.resize(keep);
  probs.resize(keep);
  const double kept = std::accumulate(probs.begin(), probs.end(), 0.0);
  for (double& v : probs) v /= kept;
  return {std::move(ids), std::move(probs)};
}

}  // namespace

absl::Status SamplingParams::Validate(int vocab_size) const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (max_tokens < 0) return bad(absl::StrCat("max_tokens must be >= 0, got ", max_tokens));
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return bad(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return bad(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return bad(absl::StrCat("min_p must be in [0, 1], got ", min_p));
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return bad(absl::StrCat("repetition_penalty must be > 0, got ", repetition_penalty));
  }
  if (!(std::abs(presence_penalty) <= 2.0f)) {
    return bad(absl::StrCat("presence_penalty must be in [-2, 2], got ", presence_penalty));
  }
  if (!(std::abs(frequency_penalty) <= 2.0f)) {
    return bad(absl::StrCat("frequency_penalty must be in [-2, 2], got ", frequency_penalty));
  }
  if (logprobs > 20) return bad(absl::StrCat("logprobs must be <= 20, got ", logprobs));
  for (int32_t t : stop_token_ids) {
    if (t < 0 || t >= vocab_size) return bad(absl::StrCat("stop_token_ids: bad token id ", t));
  }
  for (const auto& s : stop) {
    if (s.empty()) return bad("stop strings must be non-empty");
  }
  return absl::OkStatus();
}

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
  SampleResult result{};
  if (params.temperature == 0.0f) {
    result.token = Argmax(logits);
  } else {
    for (float& v : logits) v /= params.temperature;
    Candidates c = Truncate(logits, params);
    const double u = rng.Uniform();
    double cum = 0;
    result.token = c.ids.back();
    for (size_t i = 0; i < c.ids.size(); ++i) {
      cum += c.probs[i];
      if (u < cum) {
        result.token = c.ids[i];
        break;
      }
    }
  }
  if (params.logprobs >= 0) FillLogprobs(raw, params.logprobs, result);
  return result;
}

}  // namespace strata
