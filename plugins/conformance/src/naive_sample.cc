// The naive reference's `sample`: the rule of abi.h (strata_sample_params) written out
// directly — a full stable sort of the row, then each truncation in turn, in double.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "naive_internal.h"

namespace strata::naive {
namespace {

std::vector<float> LoadRow(const strata_tensor& t, int64_t row) {
  std::vector<float> v(static_cast<size_t>(t.shape[1]));
  for (int64_t i = 0; i < t.shape[1]; ++i) v[i] = static_cast<float>(At(t, row, i));
  return v;
}

// Ids in descending value order, equal values in ascending id order.
std::vector<int32_t> Order(const std::vector<float>& x) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return ids;
}

int32_t Draw(std::vector<float> x, const strata_sample_params& p) {
  if (p.temperature == 0.0f) return Order(x)[0];
  for (float& v : x) v /= p.temperature;
  const std::vector<int32_t> ids = Order(x);
  size_t keep = ids.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) keep = static_cast<size_t>(p.top_k);
  std::vector<double> prob(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(x[ids[i]] - double{x[ids[0]]});
  for (double& v : prob) v /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep && !(cum >= p.top_p)) cum += prob[n++];
    keep = std::max<size_t>(n, 1);
  }
  if (p.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && prob[n] >= p.min_p * prob[0]) ++n;
    keep = n;
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob[i];
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i] / kept;
    if (p.uniform < cum) return ids[i];
  }
  return ids[keep - 1];
}

void Logprobs(const std::vector<float>& raw, int32_t token, int n, const strata_tensor& lp,
              const strata_tensor& top, int64_t row) {
  const float max = *std::max_element(raw.begin(), raw.end());
  double sum = 0;
  for (float v : raw) sum += std::exp(static_cast<double>(v - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  Set(lp, row, 0, raw[token] - log_z);
  const std::vector<int32_t> ids = Order(raw);
  for (int i = 0; i < n && i < static_cast<int>(ids.size()); ++i) {
    Set(lp, row, 1 + i, raw[ids[i]] - log_z);
    SetInt(top, row, i, ids[i]);
  }
}

}  // namespace

strata_status Sample(strata_backend b, strata_stream, const strata_tensor* logits,
                     const strata_sample_params* params, strata_tensor* tokens,
                     strata_tensor* logprobs, strata_tensor* top_ids) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(logits, "logits", {-1, -1}, Kind::kFloat));
  const int64_t rows = logits->shape[0];
  STRATA_NAIVE_CHECK(b, ExpectTensor(tokens, "tokens", {rows}, Kind::kI32));
  if (params == nullptr) return Invalid(b, "params: NULL");
  if ((logprobs == nullptr) != (top_ids == nullptr)) {
    return Invalid(b, "logprobs and top_ids: both or neither");
  }
  if (logprobs != nullptr) {
    STRATA_NAIVE_CHECK(
        b, ExpectTensor(logprobs, "logprobs", {rows, 1 + STRATA_MAX_LOGPROBS}, Kind::kF32));
    STRATA_NAIVE_CHECK(b, ExpectTensor(top_ids, "top_ids", {rows, STRATA_MAX_LOGPROBS}, Kind::kI32));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const strata_sample_params& p = params[r];
    if (!(p.temperature >= 0) || !(p.top_p > 0 && p.top_p <= 1) || !(p.min_p >= 0 && p.min_p <= 1) ||
        !(p.uniform >= 0 && p.uniform < 1) || p.num_logprobs < -1 ||
        p.num_logprobs > STRATA_MAX_LOGPROBS || (p.num_logprobs >= 0 && logprobs == nullptr)) {
      return Invalid(b, absl::StrCat("params[", r, "] out of range"));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> raw = LoadRow(*logits, r);
    const int32_t token = Draw(raw, params[r]);
    SetInt(*tokens, r, 0, token);
    if (params[r].num_logprobs >= 0) Logprobs(raw, token, params[r].num_logprobs, *logprobs, *top_ids, r);
  }
  return STRATA_OK;
}

strata_status MaskLogits(strata_backend b, strata_stream, strata_tensor* logits,
                         const strata_tensor* rows, const strata_tensor* masks) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(logits, "logits", {-1, -1}, Kind::kFloat));
  const int64_t n_rows = logits->shape[0], vocab = logits->shape[1];
  const int64_t words = (vocab + 31) / 32;
  if (rows == nullptr || rows->ndim != 1 || rows->shape[0] < 0) return Invalid(b, "rows: bad");
  const int64_t n = rows->shape[0];
  if (n > 0) {
    STRATA_NAIVE_CHECK(b, ExpectTensor(rows, "rows", {n}, Kind::kI32));
    STRATA_NAIVE_CHECK(b, ExpectTensor(masks, "masks", {n, words}, Kind::kI32));
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t row = IntAt(*rows, i);
    if (row < 0 || row >= n_rows) continue;
    for (int64_t v = 0; v < vocab; ++v) {
      const auto word = static_cast<uint32_t>(IntAt(*masks, i, v / 32));
      if (((word >> (v % 32)) & 1u) == 0) Set(*logits, row, v, -INFINITY);
    }
  }
  return STRATA_OK;
}

}  // namespace strata::naive
