#pragma once
// Private state of ModelRunner shared by model_runner.cc (setup) and
// model_runner_forward.cc (the forward pass).
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "strata/engine/model_runner.h"

namespace strata {

// Device buffers reused across steps; grown (never shrunk) when a step needs more.
struct ModelRunner::Scratch {
  int64_t tokens = 0, rows = 0;  // capacities (rows: of logits)
  DeviceBuffer hidden, residual, normed, qkv, attn, mlp_in, mlp_act, router, topk_w, topk_ids;
  // The step's index arrays, packed into `inputs` by Upload (one copy per step) from the host
  // `staging` block; the pointers are into `inputs`, at offsets fixed by the step's sizes (so
  // a recorded graph's steps, all of one shape, find theirs in place).
  DeviceBuffer inputs;
  std::vector<int32_t> staging;
  int32_t *ids = nullptr, *positions = nullptr, *slots = nullptr, *q_start = nullptr,
          *kv_len = nullptr, *block_tables = nullptr, *logit_rows = nullptr;
  DeviceBuffer head_in, logits;
  DeviceBuffer sample_params, sample_tokens, sample_logprobs, sample_top;  // ForwardSampled
  DeviceBuffer mask_rows, mask_words;  // StepMasks, uploaded from mask_staging
  std::vector<uint32_t> mask_staging;
  // Bumped whenever a buffer above is reallocated: a recorded graph points into them.
  int64_t generation = 0;
};

// Host-side description of one step, flattened from the ForwardSeqs. Lives until the step's
// results are copied back, so asynchronous uploads from it stay valid.
struct ModelRunner::StepInputs {
  int64_t num_tokens = 0;
  std::vector<int32_t> ids, positions, slots, q_start, kv_len, block_tables, logit_rows;
  int32_t num_seqs = 0, max_blocks = 0, max_q = 0, max_kv = 0;
  bool all_decode = true;
};

// Flattens `seqs` into `in` (ids, positions, KV slots, block tables, logits rows), checking
// token ids and block ids.
absl::Status BuildStepInputs(std::span<const ForwardSeq> seqs, int block_size, int vocab,
                             int num_blocks, ModelRunner::StepInputs& in);

}  // namespace strata
