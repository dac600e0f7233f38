#pragma once
// Records the router's traffic as a strata-format trace (replay/trace.h, kStrata) that
// `strata replay --format strata` plays back: per request its arrival time (seconds since the
// recorder started), prompt and requested output lengths, and one block hash per 512-token
// block of the prompt (chained, so shared prefixes stay shared in the replay). The prompt text
// is written only when asked for. Lines are written in arrival order, one per request.
//
// Thread-safety: Record is thread-safe.
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/text/tokenizer.h"

namespace strata::router {

class TrafficRecorder {
 public:
  // `tokenizer` (not owned) is needed only with `include_prompts`. Error if `path` cannot be
  // opened for appending.
  static absl::StatusOr<std::unique_ptr<TrafficRecorder>> Open(const std::string& path,
                                                               bool include_prompts,
                                                               const Tokenizer* tokenizer);
  ~TrafficRecorder();

  // `cache_salt`: the request's; its block ids differ from other salts' as its KV blocks do.
  void Record(const std::vector<int32_t>& prompt, int max_tokens, std::string_view cache_salt = {});
  int64_t records() const;

 private:
  TrafficRecorder(std::FILE* file, bool include_prompts, const Tokenizer* tokenizer)
      : file_(file), include_prompts_(include_prompts), tokenizer_(tokenizer) {}

  std::FILE* file_;
  const bool include_prompts_;
  const Tokenizer* tokenizer_;
  const absl::Time start_ = absl::Now();
  mutable absl::Mutex mu_;
  int64_t records_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata::router
