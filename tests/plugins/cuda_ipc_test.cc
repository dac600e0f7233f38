// Device memory shared between two processes through the CUDA plugin's ipc entries. CUDA refuses
// to map a handle in the process that exported it, so the test forks before any CUDA call: the
// child exports a pool filled with a pattern (and checks that opening its own handle is
// UNSUPPORTED), sends the handle over a socket pair; the parent opens it, gathers runs of it
// into its own buffer with copy_runs and checks the bytes, then scatters runs of new bytes into
// the child's pool, which the child verifies. Skips without a CUDA device.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "strata/plugin/plugin.h"

namespace strata {
namespace {

constexpr size_t kPoolBytes = size_t{4} << 20;

std::string PluginPath(const std::string& name) {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, n) : std::string(STRATA_BINARY_DIR "/bin/x");
  dir.resize(dir.rfind('/'));
  return dir + "/libstrata_" + name + ".so";
}

uint8_t PoolByte(size_t i) { return static_cast<uint8_t>(i * 131 + 7); }
uint8_t NewByte(size_t i) { return static_cast<uint8_t>(i * 17 + 3); }

// Runs the parent writes into the child's pool (from its own buffer of NewByte values).
const std::vector<strata_copy_run>& WriteBackRuns() {
  static const std::vector<strata_copy_run> runs = {
      {0, 300000, 1000}, {1000, 600003, 70001}, {80000, 2 << 20, 1 << 20}};
  return runs;
}

// What the child tells the parent first: kReady with a handle, kSkip (no device) or kFailed.
enum : int32_t { kReady = 0, kSkip = 1, kFailed = 2 };
struct Hello {
  int32_t state = kFailed;
  char message[256] = {};
  uint8_t handle[STRATA_IPC_HANDLE_BYTES] = {};
};

bool WriteAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = read(fd, p, bytes);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

int Fail(int fd, Hello* hello, const std::string& message) {
  hello->state = kFailed;
  std::snprintf(hello->message, sizeof(hello->message), "%s", message.c_str());
  WriteAll(fd, hello, sizeof(*hello));
  return 1;
}

// The bytes the pool must hold after the parent's writes.
std::string CheckPool(const std::vector<uint8_t>& pool) {
  std::vector<uint8_t> expect(pool.size());
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = PoolByte(i);
  for (const strata_copy_run& r : WriteBackRuns()) {
    for (uint64_t j = 0; j < r.bytes; ++j) expect[r.dst_offset + j] = NewByte(r.src_offset + j);
  }
  for (size_t i = 0; i < pool.size(); ++i) {
    if (pool[i] != expect[i]) return "child pool differs at byte " + std::to_string(i);
  }
  return "";
}

// The exporting process: returns its exit code.
int Child(int fd) {
  Hello hello;
  auto plugin = Plugin::Load(PluginPath("cuda"));
  if (!plugin.ok()) return Fail(fd, &hello, std::string(plugin.status().message()));
  strata_backend probe = nullptr;
  if ((*plugin)->api().create(nullptr, &probe) == STRATA_ERR_UNSUPPORTED) {
    hello.state = kSkip;
    std::snprintf(hello.message, sizeof(hello.message), "%s", (*plugin)->api().last_error(nullptr));
    return WriteAll(fd, &hello, sizeof(hello)) ? 0 : 1;
  }
  if (probe != nullptr) (*plugin)->api().destroy(probe);
  auto backend = Backend::Create(*plugin);
  if (!backend.ok()) return Fail(fd, &hello, std::string(backend.status().message()));
  Backend& be = **backend;
  if (!be.plugin().has_ipc()) return Fail(fd, &hello, "the CUDA plugin has no ipc entries");
  auto pool = be.Alloc(kPoolBytes);
  if (!pool.ok()) return Fail(fd, &hello, std::string(pool.status().message()));
  std::vector<uint8_t> bytes(kPoolBytes);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = PoolByte(i);
  if (absl::Status st = be.CopyToDevice(*pool, bytes.data(), bytes.size()); !st.ok()) {
    return Fail(fd, &hello, std::string(st.message()));
  }
  if (absl::Status st = be.Synchronize(); !st.ok())
    return Fail(fd, &hello, std::string(st.message()));
  auto handle = be.IpcExport(*pool);
  if (!handle.ok()) return Fail(fd, &hello, std::string(handle.status().message()));
  auto self = be.IpcOpen(*handle);
  if (self.status().code() != absl::StatusCode::kUnimplemented) {
    return Fail(fd, &hello,
                "opening the handle in the exporting process did not give "
                "Unimplemented: " +
                    self.status().ToString());
  }
  hello.state = kReady;
  std::memcpy(hello.handle, handle->data(), STRATA_IPC_HANDLE_BYTES);
  if (!WriteAll(fd, &hello, sizeof(hello))) return 1;
  char done = 0;
  if (!ReadAll(fd, &done, 1)) return 1;  // the parent has written into the pool
  std::string verdict;
  if (absl::Status st = be.CopyToHost(bytes.data(), *pool, bytes.size()); !st.ok()) {
    verdict = std::string(st.message());
  } else {
    verdict = CheckPool(bytes);
  }
  verdict.resize(256);
  WriteAll(fd, verdict.data(), verdict.size());
  be.Free(*pool);
  return 0;
}

class CudaIpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    child_ = fork();  // before this process makes any CUDA call
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(fds[0]);
      _exit(Child(fds[1]));
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    if (child_ > 0) {
      int status = 0;
      ASSERT_EQ(waitpid(child_, &status, 0), child_);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    }
  }

  pid_t child_ = -1;
  int fd_ = -1;
};

TEST_F(CudaIpcTest, AnotherProcessReadsAndWritesAnExportedPoolWithCopyRuns) {
  Hello hello;
  ASSERT_TRUE(ReadAll(fd_, &hello, sizeof(hello)));
  if (hello.state == kSkip) GTEST_SKIP() << hello.message;
  ASSERT_EQ(hello.state, kReady) << hello.message;

  auto plugin = Plugin::Load(PluginPath("cuda"));
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  auto backend = Backend::Create(*plugin);
  ASSERT_TRUE(backend.ok()) << backend.status();
  Backend& be = **backend;
  auto pool =
      be.IpcOpen(std::string(reinterpret_cast<const char*>(hello.handle), STRATA_IPC_HANDLE_BYTES));
  ASSERT_TRUE(pool.ok()) << pool.status();

  // Gather runs of the child's pool (aligned, unaligned, one over 1 MiB) into a buffer here.
  const std::vector<strata_copy_run> gather = {
      {0, 0, 4096}, {100001, 4096, 5000}, {512 << 10, 9096, 3 << 19}, {kPoolBytes - 7, 1600001, 7}};
  const size_t mine_bytes = size_t{2} << 20;
  auto mine = be.Alloc(mine_bytes);
  ASSERT_TRUE(mine.ok()) << mine.status();
  std::vector<uint8_t> host(mine_bytes, 0);
  ASSERT_TRUE(be.CopyToDevice(*mine, host.data(), host.size()).ok());
  ASSERT_TRUE(be.CopyRuns(nullptr, *mine, *pool, gather).ok());
  ASSERT_TRUE(be.CopyToHost(host.data(), *mine, host.size()).ok());
  std::vector<uint8_t> expect(mine_bytes, 0);
  for (const strata_copy_run& r : gather) {
    for (uint64_t j = 0; j < r.bytes; ++j) expect[r.dst_offset + j] = PoolByte(r.src_offset + j);
  }
  for (size_t i = 0; i < mine_bytes; ++i) ASSERT_EQ(host[i], expect[i]) << "byte " << i;

  // Scatter new bytes into the child's pool; the child checks them (and the rest unchanged).
  for (size_t i = 0; i < mine_bytes; ++i) host[i] = NewByte(i);
  ASSERT_TRUE(be.CopyToDevice(*mine, host.data(), host.size()).ok());
  ASSERT_TRUE(be.CopyRuns(nullptr, *pool, *mine, WriteBackRuns()).ok());
  ASSERT_TRUE(be.Synchronize().ok());
  const char done = 1;
  ASSERT_TRUE(WriteAll(fd_, &done, 1));
  std::string verdict(256, '\0');
  ASSERT_TRUE(ReadAll(fd_, verdict.data(), verdict.size()));
  EXPECT_STREQ(verdict.c_str(), "");
  be.IpcClose(*pool);
  be.Free(*mine);
}

}  // namespace
}  // namespace strata
