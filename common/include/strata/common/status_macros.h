#pragma once
// Status plumbing used on every serving path: no exceptions, canonical codes.
//   kInvalidArgument  - the caller's fault (bad input, bad file)
//   kUnavailable      - retry later
//   kResourceExhausted- shed load / out of memory or blocks
//   kInternal         - a bug or a backend failure
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_STATUS_CONCAT_INNER_(a, b) a##b
#define STRATA_STATUS_CONCAT_(a, b) STRATA_STATUS_CONCAT_INNER_(a, b)

#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status strata_status_ = (expr);          \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_STATUS_CONCAT_(strata_statusor_, __LINE__), lhs, expr)

#define STRATA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
