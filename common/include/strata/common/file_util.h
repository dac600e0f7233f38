#pragma once
#include <string>

#include "absl/status/statusor.h"

namespace strata {

// Whole-file read; NotFound / PermissionDenied / Internal name the path.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
absl::Status WriteStringToFile(const std::string& path, const std::string& contents);

}  // namespace strata
