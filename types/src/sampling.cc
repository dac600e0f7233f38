#include "strata/types/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata {

absl::Status SamplingParams::Validate(int vocab_size) const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (cache_salt.size() > kMaxCacheSaltBytes) {
    return bad(absl::StrCat("cache_salt must be at most ", kMaxCacheSaltBytes, " bytes, got ",
                            cache_salt.size()));
  }
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
  if (min_tokens < 0) return bad(absl::StrCat("min_tokens must be >= 0, got ", min_tokens));
  if (logprobs > 20) return bad(absl::StrCat("logprobs must be <= 20, got ", logprobs));
  for (int32_t t : stop_token_ids) {
    if (t < 0 || t >= vocab_size) return bad(absl::StrCat("stop_token_ids: bad token id ", t));
  }
  if (logit_bias.size() > kMaxLogitBias) {
    return bad(absl::StrCat("logit_bias may hold at most ", kMaxLogitBias, " entries, got ",
                            logit_bias.size()));
  }
  std::vector<int32_t> ids;
  ids.reserve(logit_bias.size());
  for (const auto& [t, b] : logit_bias) {
    if (t < 0 || t >= vocab_size) return bad(absl::StrCat("logit_bias: bad token id ", t));
    if (!(std::abs(b) <= kMaxLogitBiasValue)) {
      return bad(absl::StrCat("logit_bias: the bias of token ", t, " must be in [-",
                              kMaxLogitBiasValue, ", ", kMaxLogitBiasValue, "], got ", b));
    }
    ids.push_back(t);
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return bad("logit_bias: a token id appears more than once");
  }
  for (const auto& s : stop) {
    if (s.empty()) return bad("stop strings must be non-empty");
  }
  return absl::OkStatus();
}

}  // namespace strata
