#pragma once
// Resuming a request after its router died (docs/api.md, "Retries and resumption"): the
// client's `Idempotency-Key` names the request across routers, and on a streaming retry its
// `Last-Event-ID` says how many SSE chunks of each choice it already has. Internal to
// strata::openai.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/generation_job.h"
#include "strata/http/server.h"
#include "strata/openai/backend.h"
#include "strata/openai/protocol.h"

namespace strata::openai::internal {

// Longest Idempotency-Key accepted, in bytes (its characters: letters, digits and "-_.:~+=/").
inline constexpr size_t kMaxIdempotencyKeyBytes = 255;

// Reads the headers into spec->idempotency_key and spec->resume_after (spec's choices, stream
// flag already set). A backend that cannot resume (Backend::CanResume) ignores both headers, as
// do requests without a key; a bad key or Last-Event-ID is a 400.
std::optional<ApiError> ApplyResumeHeaders(const http::Request& request, const Backend& backend,
                                           JobSpec* spec);

// The SSE `id:` of a keyed stream: the number of chunks of each choice sent so far, joined by
// "." ("12" with one choice, "12.9" with two).
std::string StreamEventId(const std::vector<int64_t>& chunks_per_choice);

}  // namespace strata::openai::internal
