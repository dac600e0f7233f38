#include "strata/common/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InternalError(msg);
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::InternalError(absl::StrCat(path, ": read error"));
  return out;
}

absl::Status WriteStringToFile(const std::string& path, const std::string& contents) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  const size_t n = std::fwrite(contents.data(), 1, contents.size(), f);
  const bool close_failed = std::fclose(f) != 0;
  if (n != contents.size() || close_failed) {
    return absl::InternalError(absl::StrCat(path, ": write error"));
  }
  return absl::OkStatus();
}

}  // namespace strata
