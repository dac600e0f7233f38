// The G3 data file (SlotFile, disk_tier_internal.h): POSIX with O_DIRECT, or a rocksdb::Env.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "disk_tier_internal.h"
#include "rocksdb/env.h"

namespace strata::kvstore::disk_internal {
namespace {

absl::Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  std::string msg =
      absl::StrCat("disk tier ", std::string(what), " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

// Advances `iov` past `done` bytes (after a short transfer); returns the first unfinished one.
size_t Advance(std::vector<iovec>& iov, size_t first, size_t done) {
  while (first < iov.size() && done >= iov[first].iov_len) {
    done -= iov[first].iov_len;
    ++first;
  }
  if (first < iov.size()) {
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
    iov[first].iov_len -= done;
  }
  return first;
}

class PosixSlotFile final : public SlotFile {
 public:
  PosixSlotFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixSlotFile() override { ::close(fd_); }

  absl::Status Write(uint64_t offset, std::span<const std::span<const std::byte>> parts) override {
    std::vector<iovec> iov;
    for (auto p : parts) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
    return Transfer(offset, iov, /*write=*/true);
  }

  absl::Status Read(uint64_t offset, std::span<const std::span<std::byte>> parts) const override {
    std::vector<iovec> iov;
    for (auto p : parts) iov.push_back({p.data(), p.size()});
    return Transfer(offset, iov, /*write=*/false);
  }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Resize(uint64_t bytes) override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("stat", path_, errno);
    const auto size = static_cast<uint64_t>(st.st_size);
    if (bytes > size) {
      // Reserve the blocks now: a full disk fails here, at open, not on a later Put. fallocate(2)
      // itself, not posix_fallocate, which emulates it by writing every block where the file
      // system cannot (then the file is only extended, sparse).
      if (::fallocate(fd_, 0, static_cast<off_t>(size), static_cast<off_t>(bytes - size)) == 0) {
        return absl::OkStatus();
      }
      if (errno != EOPNOTSUPP && errno != ENOSYS) return ErrnoStatus("fallocate", path_, errno);
    }
    if (bytes != size && ::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
      return ErrnoStatus("truncate", path_, errno);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() const override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  bool direct_io() const override { return direct_; }

 private:
  // One preadv/pwritev per call unless the kernel transfers less (then the rest, in order).
  absl::Status Transfer(uint64_t offset, std::vector<iovec>& iov, bool write) const {
    size_t first = 0;
    while (first < iov.size()) {
      const int count = static_cast<int>(iov.size() - first);
      const ssize_t n = write ? ::pwritev(fd_, &iov[first], count, static_cast<off_t>(offset))
                              : ::preadv(fd_, &iov[first], count, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(write ? "write" : "read", path_, errno);
      if (n == 0) {
        if (write)
          return absl::UnavailableError(absl::StrCat("disk tier: no progress writing ", path_));
        return absl::DataLossError(absl::StrCat("disk tier: ", path_, " ends before the slot"));
      }
      offset += static_cast<uint64_t>(n);
      first = Advance(iov, first, static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  const std::string path_;
  const int fd_;
  const bool direct_;
};

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("disk tier ", std::string(what), ": ", s.ToString()));
}

// Through a rocksdb::Env (tests: in-memory, fault injection). Buffered; one call per part.
class EnvSlotFile final : public SlotFile {
 public:
  EnvSlotFile(rocksdb::Env* env, std::string path, std::unique_ptr<rocksdb::RandomRWFile> file)
      : env_(env), path_(std::move(path)), file_(std::move(file)) {}
  ~EnvSlotFile() override { file_->Close().PermitUncheckedError(); }

  absl::Status Write(uint64_t offset, std::span<const std::span<const std::byte>> parts) override {
    for (auto p : parts) {
      const rocksdb::Slice data(reinterpret_cast<const char*>(p.data()), p.size());
      if (absl::Status s = FromRocks(file_->Write(offset, data), "write"); !s.ok()) return s;
      offset += p.size();
    }
    return absl::OkStatus();
  }

  absl::Status Read(uint64_t offset, std::span<const std::span<std::byte>> parts) const override {
    for (auto p : parts) {
      char* scratch = reinterpret_cast<char*>(p.data());
      rocksdb::Slice got;
      if (absl::Status s = FromRocks(file_->Read(offset, p.size(), &got, scratch), "read");
          !s.ok()) {
        return s;
      }
      if (got.size() != p.size()) {
        return absl::DataLossError(absl::StrCat("disk tier: ", path_, " ends before the slot"));
      }
      if (got.data() != scratch) std::memcpy(scratch, got.data(), got.size());
      offset += p.size();
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override { return FromRocks(file_->Sync(), "sync"); }

  // Growing is implicit (slots are written before they are read); shrinking truncates where
  // the Env can.
  absl::Status Resize(uint64_t bytes) override {
    uint64_t size = 0;
    if (!env_->GetFileSize(path_, &size).ok() || bytes >= size) return absl::OkStatus();
    rocksdb::Status s = env_->Truncate(path_, bytes);
    return s.IsNotSupported() ? absl::OkStatus() : FromRocks(s, "truncate");
  }

  absl::StatusOr<uint64_t> Size() const override {
    uint64_t size = 0;
    if (absl::Status s = FromRocks(env_->GetFileSize(path_, &size), "stat"); !s.ok()) return s;
    return size;
  }

  bool direct_io() const override { return false; }

 private:
  rocksdb::Env* const env_;
  const std::string path_;
  std::unique_ptr<rocksdb::RandomRWFile> file_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SlotFile>> OpenPosixSlotFile(const std::string& path,
                                                            bool want_direct) {
  constexpr int kFlags = O_RDWR | O_CREAT | O_CLOEXEC;
  int fd = -1;
  bool direct = false;
  if (want_direct) {
    fd = ::open(path.c_str(), kFlags | O_DIRECT, 0644);
    direct = fd >= 0;
    // tmpfs and some network file systems refuse O_DIRECT (EINVAL): fall back to buffered.
    if (fd < 0 && errno != EINVAL) return ErrnoStatus("open", path, errno);
  }
  if (fd < 0) fd = ::open(path.c_str(), kFlags, 0644);
  if (fd < 0) return ErrnoStatus("open", path, errno);
  return std::make_unique<PosixSlotFile>(path, fd, direct);
}

absl::StatusOr<std::unique_ptr<SlotFile>> OpenEnvSlotFile(rocksdb::Env* env,
                                                          const std::string& path) {
  if (env->FileExists(path).IsNotFound()) {
    std::unique_ptr<rocksdb::WritableFile> create;
    rocksdb::Status s = env->NewWritableFile(path, &create, rocksdb::EnvOptions());
    if (s.ok()) s = create->Close();
    if (!s.ok()) return FromRocks(s, absl::StrCat("create ", path));
  }
  std::unique_ptr<rocksdb::RandomRWFile> file;
  rocksdb::Status s = env->NewRandomRWFile(path, &file, rocksdb::EnvOptions());
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", path));
  return std::make_unique<EnvSlotFile>(env, path, std::move(file));
}

}  // namespace strata::kvstore::disk_internal
