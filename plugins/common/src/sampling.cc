#include "strata/plugin_common/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace strata::plugin_common {
namespace {

// The candidates in the rule's order (value descending, id ascending), produced lazily: each
// Extend sorts the next chunk of the not-yet-ordered ids (nth_element, then sort of the chunk),
// chunks doubling from 256, so a row whose kept prefix is short costs a few passes over the
// vocabulary instead of a full sort.
class Order {
 public:
  // `ordered`: `ids` are in the rule's order already.
  Order(const float* x, std::vector<int32_t> ids, bool ordered)
      : x_(x), ids_(std::move(ids)), ready_(ordered ? ids_.size() : 0) {}

  size_t size() const { return ids_.size(); }
  size_t ready() const { return ready_; }
  int32_t operator[](size_t i) const { return ids_[i]; }
  // Makes at least min(n, size()) leading ids ordered.
  void EnsureReady(size_t n) {
    while (ready_ < std::min(n, ids_.size())) Extend();
  }

 private:
  bool Before(int32_t a, int32_t b) const { return x_[a] > x_[b] || (x_[a] == x_[b] && a < b); }
  void Extend() {
    const size_t end = std::min(ids_.size(), ready_ + std::max<size_t>(256, ready_));
    auto before = [this](int32_t a, int32_t b) { return Before(a, b); };
    if (end < ids_.size()) {
      std::nth_element(ids_.begin() + ready_, ids_.begin() + end, ids_.end(), before);
    }
    std::sort(ids_.begin() + ready_, ids_.begin() + end, before);
    ready_ = end;
  }

  const float* x_;
  std::vector<int32_t> ids_;
  size_t ready_;
};

// The top-k candidates in order (a heap-based partial sort: one comparison for most of a row
// when k is small), or all ids in id order when top_k is off.
std::vector<int32_t> TopK(const float* x, int64_t vocab, int32_t top_k) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  if (top_k > 0 && top_k < vocab) {
    std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), [&](int32_t a, int32_t b) {
      return x[a] > x[b] || (x[a] == x[b] && a < b);
    });
    ids.resize(static_cast<size_t>(top_k));
  }
  return ids;
}

}  // namespace

int32_t ArgmaxRow(const float* logits, int64_t vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(vocab); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// The rule (abi.h strata_sample_params) with the kept prefix ordered only as far as needed:
// mass e_i = exp(double(x_i) - max) over the top-k set (totals in the set's order); top-p keeps
// the shortest prefix with cumulative e / total >= top_p; min-p keeps the leading candidates
// with e_i / total >= min_p * (1 / total) (e of the first is 1); the draw is the first kept
// candidate whose cumulative renormalized probability exceeds `uniform`.
int32_t SampleRow(float* logits, int64_t vocab, const strata_sample_params& p) {
  if (p.temperature == 0.0f) return ArgmaxRow(logits, vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] /= p.temperature;
  std::vector<int32_t> top = TopK(logits, vocab, p.top_k);
  double total = 0;
  float max = logits[top[0]];
  for (int32_t id : top) max = std::max(max, logits[id]);
  for (int32_t id : top) total += std::exp(logits[id] - double{max});
  const bool ordered = top.size() < static_cast<size_t>(vocab);  // TopK sorted them
  Order order(logits, std::move(top), ordered);
  auto prob = [&](size_t i) { return std::exp(logits[order[i]] - double{max}) / total; };
  size_t keep = order.size();
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      order.EnsureReady(n + 1);
      cum += prob(n++);
      if (cum >= p.top_p) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  if (p.min_p > 0.0f) {
    const double threshold = p.min_p * (1.0 / total);
    size_t n = 1;
    while (n < keep) {
      order.EnsureReady(n + 1);
      if (!(prob(n) >= threshold)) break;
      ++n;
    }
    keep = n;
  }
  // Renormalize over what is kept (in whatever order the ids stand: ordered where a truncation
  // cut), then draw, ordering candidates only as far as the draw goes.
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob(i);
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    order.EnsureReady(i + 1);
    cum += prob(i) / kept;
    if (p.uniform < cum) return order[i];
  }
  return order[keep - 1];
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
