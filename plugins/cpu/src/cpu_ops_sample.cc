// sample: the ABI's sampling rule (plugin_common/sampling.h) row by row over the pool.
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

}  // namespace strata::cpu
