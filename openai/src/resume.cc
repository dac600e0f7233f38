#include "src/resume.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace strata::openai::internal {
namespace {

bool KeyCharOk(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("-_.:~+=/").find(c) != std::string_view::npos;
}

std::string Header(const http::Request& request, const std::string& lower_name) {
  auto it = request.headers.find(lower_name);
  return it == request.headers.end() ? std::string() : it->second;
}

// Last-Event-ID: one chunk count per choice, as StreamEventId writes them.
std::optional<ApiError> ParseLastEventId(const std::string& value, size_t choices,
                                         std::vector<int64_t>* out) {
  constexpr int64_t kMaxChunks = int64_t{1} << 40;
  const ApiError bad = ApiError::BadRequest(
      absl::StrCat("Last-Event-ID must be an event id of this request's stream (", choices,
                   " chunk count(s) joined by '.'), got '", value.substr(0, 64), "'"));
  if (value.size() > 24 * choices) return bad;
  std::vector<absl::string_view> parts = absl::StrSplit(value, '.');
  if (parts.size() != choices) return bad;
  out->clear();
  for (absl::string_view p : parts) {
    int64_t n = 0;
    if (p.empty() || !absl::SimpleAtoi(p, &n) || n < 0 || n > kMaxChunks) return bad;
    out->push_back(n);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ApplyResumeHeaders(const http::Request& request, const Backend& backend,
                                           JobSpec* spec) {
  const std::string key = Header(request, "idempotency-key");
  if (key.empty() || !backend.CanResume()) return std::nullopt;
  if (key.size() > kMaxIdempotencyKeyBytes || !std::all_of(key.begin(), key.end(), KeyCharOk)) {
    return ApiError::BadRequest(absl::StrCat("Idempotency-Key must have 1 to ",
                                             kMaxIdempotencyKeyBytes,
                                             " characters among letters, digits and -_.:~+=/"));
  }
  spec->idempotency_key = key;
  const std::string last = Header(request, "last-event-id");
  if (last.empty() || !spec->stream) return std::nullopt;
  return ParseLastEventId(last, spec->prompts.size() * size_t(spec->n), &spec->resume_after);
}

std::string StreamEventId(const std::vector<int64_t>& chunks_per_choice) {
  return absl::StrJoin(chunks_per_choice, ".");
}

}  // namespace strata::openai::internal
