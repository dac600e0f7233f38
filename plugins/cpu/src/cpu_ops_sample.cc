// sample: the ABI's sampling rule (plugin_common/sampling.h) row by row over the pool;
// mask_logits: a token mask per listed row.
#include <algorithm>
#include <limits>
#include <vector>

#include "cpu_ops.h"
#include "strata/plugin_common/op_args.h"
#include "strata/plugin_common/sampling.h"

namespace strata::cpu {

Status Sample(CpuBackend& be, const strata_tensor* logits, const strata_sample_params* params,
              strata_tensor* tokens, strata_tensor* logprobs, strata_tensor* top_ids) {
  plugin_common::SampleArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckSample(kFloatDtype, logits, params, tokens, logprobs, top_ids, &a));
  const int64_t rows = a.logits.rows, vocab = a.logits.cols;
  for (int64_t r = 0; r < rows; ++r) {
    STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckSampleParams(params[r], r));
    if (params[r].num_logprobs >= 0 && !a.has_logprobs) {
      return plugin_common::InvalidArgument("sample", "params[", r,
                                            "] asks for logprobs but logprobs is NULL");
    }
  }
  be.pool().ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(vocab));
    for (int64_t r = begin; r < end; ++r) {
      const float* row = a.logits.Row<float>(r);
      const strata_sample_params& p = params[r];
      scratch.assign(row, row + vocab);
      const int32_t token = plugin_common::SampleRow(scratch.data(), vocab, p);
      a.tokens.Row<int32_t>(r)[0] = token;
      if (p.num_logprobs < 0) continue;
      float* lp = a.logprobs.Row<float>(r);
      plugin_common::RowLogprobs(row, vocab, token, p.num_logprobs, lp,
                                 a.top_ids.Row<int32_t>(r), lp + 1);
    }
  });
  return Status();
}

Status MaskLogits(CpuBackend& be, strata_tensor* logits, const strata_tensor* rows,
                  const strata_tensor* masks) {
  plugin_common::MaskLogitsArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckMaskLogits(kFloatDtype, logits, rows, masks, &a));
  const int64_t n = a.rows.rows, vocab = a.logits.cols;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  // Rows are processed one list entry after another (a row listed twice sees both masks).
  for (int64_t i = 0; i < n; ++i) {
    const int32_t row = a.rows.IntRow(i)[0];
    if (row < 0 || row >= a.logits.rows) continue;
    float* out = a.logits.Row<float>(row);
    const auto* words = reinterpret_cast<const uint32_t*>(a.masks.IntRow(i));
    be.pool().ParallelFor(a.words, 256, [&](int64_t begin, int64_t end) {
      for (int64_t w = begin; w < end; ++w) {
        const uint32_t word = words[w];
        if (word == 0xffffffffu) continue;
        const int64_t last = std::min<int64_t>(vocab, w * 32 + 32);
        for (int64_t v = w * 32; v < last; ++v) {
          if (((word >> (v & 31)) & 1u) == 0) out[v] = kNegInf;
        }
      }
    });
  }
  return Status();
}

}  // namespace strata::cpu
