#include "strata/plugin_common/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace strata::plugin_common {
namespace {

// Candidates sorted by descending logit (ties: lowest id), truncated by top-k / top-p / min-p,
// with their probabilities renormalized over what is kept.
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> probs;
};

Candidates Truncate(const float* logits, int64_t vocab, const strata_sample_params& p) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  int64_t keep = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  ids.resize(static_cast<size_t>(keep));
  std::vector<double> probs(static_cast<size_t>(keep));
  const double max = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(logits[ids[i]] - max);
  for (double& v : probs) v /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    int64_t n = 0;
    while (n < keep) {
      cum += probs[n++];
      if (cum >= p.top_p) break;
    }
    keep = std::max<int64_t>(n, 1);
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * probs[0];
    int64_t n = 1;
    while (n < keep && probs[n] >= threshold) ++n;
    keep = n;
  }
  ids.resize(static_cast<size_t>(keep));
  probs.resize(static_cast<size_t>(keep));
  const double kept = std::accumulate(probs.begin(), probs.end(), 0.0);
  for (double& v : probs) v /= kept;
  return {std::move(ids), std::move(probs)};
}

}  // namespace

int32_t ArgmaxRow(const float* logits, int64_t vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(vocab); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

int32_t SampleRow(float* logits, int64_t vocab, const strata_sample_params& p) {
  if (p.temperature == 0.0f) return ArgmaxRow(logits, vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] /= p.temperature;
  const Candidates c = Truncate(logits, vocab, p);
  double cum = 0;
  for (size_t i = 0; i < c.ids.size(); ++i) {
    cum += c.probs[i];
    if (p.uniform < cum) return c.ids[i];
  }
  return c.ids.back();
}

void RowLogprobs(const float* raw, int64_t vocab, int32_t token, int n, float* chosen,
                 int32_t* top_ids, float* top_logprobs) {
  const float max = *std::max_element(raw, raw + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(raw[i] - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  *chosen = raw[token] - log_z;
  if (n <= 0) return;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  n = static_cast<int>(std::min<int64_t>(n, vocab));
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
  });
  for (int i = 0; i < n; ++i) {
    top_ids[i] = idx[i];
    top_logprobs[i] = raw[idx[i]] - log_z;
  }
}

}  // namespace strata::plugin_common
