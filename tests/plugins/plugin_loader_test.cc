// The plugin loader (strata/plugin/plugin.h): every way a file can fail to be a usable plugin
// gives its own status code and a message naming the file, and short names resolve through
// $STRATA_PLUGIN_DIR, the executable's directory and ../lib/strata.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "strata/plugin/naive_plugin.h"
#include "strata/plugin/plugin.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kBin = STRATA_BINARY_DIR "/bin/";

std::string Message(const absl::Status& status) { return std::string(status.message()); }

std::string TestPlugin(const std::string& variant) {
  return kBin + "libloader_test_" + variant + ".so";
}

class PluginLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* dir = std::getenv("STRATA_PLUGIN_DIR")) saved_dir_ = dir;
    unsetenv("STRATA_PLUGIN_DIR");
    temp_ = fs::path(::testing::TempDir()) /
            ("plugin_loader_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(temp_);
    fs::create_directories(temp_);
  }
  void TearDown() override {
    if (saved_dir_) {
      setenv("STRATA_PLUGIN_DIR", saved_dir_->c_str(), 1);
    } else {
      unsetenv("STRATA_PLUGIN_DIR");
    }
    fs::remove_all(temp_);
  }

  fs::path temp_;
  std::optional<std::string> saved_dir_;
};

TEST_F(PluginLoaderTest, LoadsTheCpuPluginByPath) {
  auto plugin = Plugin::Load(kBin + "libstrata_cpu.so");
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->api().api_version, STRATA_PLUGIN_API_VERSION);
  EXPECT_EQ((*plugin)->origin(), kBin + "libstrata_cpu.so");
}

// The test binary lives next to libstrata_cpu.so, as the strata binary does.
TEST_F(PluginLoaderTest, ResolvesAShortNameNextToTheExecutable) {
  auto plugin = LoadPlugin("cpu");
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ(fs::canonical((*plugin)->origin()), fs::canonical(kBin + "libstrata_cpu.so"));
  EXPECT_STREQ((*plugin)->api().plugin_name, "cpu");
}

TEST_F(PluginLoaderTest, StrataPluginDirComesFirst) {
  fs::copy_file(kBin + "libstrata_cpu.so", temp_ / "libstrata_cpu.so");
  setenv("STRATA_PLUGIN_DIR", temp_.c_str(), 1);
  auto plugin = LoadPlugin("cpu");
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->origin(), (temp_ / "libstrata_cpu.so").string());
}

TEST_F(PluginLoaderTest, ErrorsOfAResolvedNameNameTheResolvedFile) {
  const fs::path file = temp_ / "libstrata_oldversion.so";
  fs::copy_file(TestPlugin("bad_version"), file);
  setenv("STRATA_PLUGIN_DIR", temp_.c_str(), 1);
  auto plugin = LoadPlugin("oldversion");
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(plugin.status()), StartsWith(file.string() + ": "));
}

TEST_F(PluginLoaderTest, UnknownNameListsWhereItLooked) {
  setenv("STRATA_PLUGIN_DIR", temp_.c_str(), 1);
  auto plugin = LoadPlugin("no_such_backend");
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(HasSubstr("libstrata_no_such_backend.so"), HasSubstr(temp_.string()),
                    HasSubstr("/../lib/strata")));
}

TEST_F(PluginLoaderTest, MissingFileIsNotFound) {
  const std::string path = (temp_ / "libnothing.so").string();
  auto plugin = Plugin::Load(path);
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(plugin.status()), StartsWith(path + ": "));
  // A name ending in .so is a path, relative to the working directory.
  EXPECT_EQ(LoadPlugin("libnothing.so").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PluginLoaderTest, NonElfFileIsInvalidArgument) {
  const std::string path = (temp_ / "libtext.so").string();
  std::ofstream(path) << "this is not a shared library\n";
  auto plugin = LoadPlugin(path);
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(StartsWith(path + ": "), HasSubstr("cannot load plugin")));
}

TEST_F(PluginLoaderTest, WrongApiVersionIsFailedPrecondition) {
  auto plugin = Plugin::Load(TestPlugin("bad_version"));
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(StartsWith(TestPlugin("bad_version") + ": "), HasSubstr("version 2")));
}

TEST_F(PluginLoaderTest, TableFromAnOlderHeaderIsFailedPrecondition) {
  auto plugin = Plugin::Load(TestPlugin("short_table"));
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(StartsWith(TestPlugin("short_table") + ": "), HasSubstr("bytes")));
}

TEST_F(PluginLoaderTest, TableEndingBeforeTheOptionalEntriesLoadsWithoutThem) {
  // Its struct_size stops before `sample` (a table built before that entry existed); the
  // entry it nevertheless filled must not be read.
  auto plugin = Plugin::Load(TestPlugin("pre_sample"));
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_FALSE((*plugin)->has_sample());
  EXPECT_EQ((*plugin)->api().sample, nullptr);
  EXPECT_NE((*plugin)->api().gemm, nullptr);
}

TEST_F(PluginLoaderTest, TableEndingBeforeTheOptionalEntriesHasNoIpcOrBatchedCopy) {
  auto plugin = Plugin::Load(TestPlugin("pre_sample"));
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_FALSE((*plugin)->has_ipc());
  EXPECT_FALSE((*plugin)->has_copy_runs());
}

TEST_F(PluginLoaderTest, MissingRequiredEntryIsInvalidArgumentNamingIt) {
  auto plugin = Plugin::Load(TestPlugin("missing_entry"));
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(StartsWith(TestPlugin("missing_entry") + ": "), HasSubstr("gemm")));
}

TEST_F(PluginLoaderTest, LibraryWithoutTheEntrySymbolIsInvalidArgument) {
  auto plugin = Plugin::Load(TestPlugin("no_entry"));
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(plugin.status()), AllOf(StartsWith(TestPlugin("no_entry") + ": "),
                                              HasSubstr(STRATA_PLUGIN_ENTRY_SYMBOL)));
}

TEST_F(PluginLoaderTest, NullTableIsInvalidArgument) {
  auto plugin = Plugin::Load(TestPlugin("null_table"));
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(StartsWith(TestPlugin("null_table") + ": "), HasSubstr("NULL")));
}

TEST_F(PluginLoaderTest, TheNaiveReferenceIsABuiltInTable) {
  auto plugin = NaivePlugin();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ((*plugin)->origin(), "naive");
  EXPECT_TRUE((*plugin)->has_moe());
  auto backend = Backend::Create(*plugin);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_STREQ((*backend)->info().name, "naive");
  EXPECT_EQ((*backend)->info().kv_dtype, STRATA_DTYPE_F32);
  // A config the naive backend does not understand fails creation.
  EXPECT_FALSE(Backend::Create(*plugin, R"({"dtype":"int4"})").ok());
}

// --- the optional ipc trio and copy_runs through the Backend wrapper --------------------------
// A fake trio on the naive table: export writes a recognizable handle, open refuses (as a
// backend does for the exporting process itself) after recording what it was given.

std::string last_opened_handle;

strata_status FakeIpcExport(strata_backend, void*, uint8_t handle[STRATA_IPC_HANDLE_BYTES]) {
  for (int i = 0; i < STRATA_IPC_HANDLE_BYTES; ++i) handle[i] = static_cast<uint8_t>(i + 1);
  return STRATA_OK;
}

strata_status FakeIpcOpen(strata_backend, const uint8_t handle[STRATA_IPC_HANDLE_BYTES], void**) {
  last_opened_handle.assign(reinterpret_cast<const char*>(handle), STRATA_IPC_HANDLE_BYTES);
  return STRATA_ERR_UNSUPPORTED;
}

void FakeIpcClose(strata_backend, void*) {}

TEST(PluginIpcTest, OnlySomeIpcEntriesIsInvalidArgumentNamingTheMissingOnes) {
  strata_plugin_api_v1 table = *NaivePluginApi();
  table.ipc_export = FakeIpcExport;
  auto plugin = Plugin::FromTable(&table, "half-ipc");
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(plugin.status()),
              AllOf(StartsWith("half-ipc: "), HasSubstr("ipc_open, ipc_close"),
                    ::testing::Not(HasSubstr("ipc_export"))));
  table.ipc_open = FakeIpcOpen;
  table.ipc_close = FakeIpcClose;
  plugin = Plugin::FromTable(&table, "ipc");
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_TRUE((*plugin)->has_ipc());
}

TEST(PluginIpcTest, BackendWrapsTheIpcEntries) {
  strata_plugin_api_v1 table = *NaivePluginApi();
  table.ipc_export = FakeIpcExport;
  table.ipc_open = FakeIpcOpen;
  table.ipc_close = FakeIpcClose;
  auto plugin = Plugin::FromTable(&table, "ipc");
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  auto backend = Backend::Create(*plugin);
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto handle = (*backend)->IpcExport(reinterpret_cast<void*>(0x1000));
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_EQ(handle->size(), size_t{STRATA_IPC_HANDLE_BYTES});
  EXPECT_EQ((*handle)[0], 1);
  EXPECT_EQ((*handle)[STRATA_IPC_HANDLE_BYTES - 1], STRATA_IPC_HANDLE_BYTES);

  // A handle of the wrong length never reaches the plugin.
  last_opened_handle.clear();
  auto wrong = (*backend)->IpcOpen(handle->substr(1));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(wrong.status()), HasSubstr("63"));
  EXPECT_TRUE(last_opened_handle.empty());
  // The plugin's UNSUPPORTED is Unimplemented, and it saw the whole handle.
  auto refused = (*backend)->IpcOpen(*handle);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(refused.status()), HasSubstr("ipc_open"));
  EXPECT_EQ(last_opened_handle, *handle);
}

TEST(PluginIpcTest, WithoutTheEntriesTheWrappersAreUnimplemented) {
  auto plugin = NaivePlugin();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_FALSE((*plugin)->has_ipc());
  auto backend = Backend::Create(*plugin);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->IpcExport(nullptr).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*backend)->IpcOpen(std::string(STRATA_IPC_HANDLE_BYTES, 'x')).status().code(),
            absl::StatusCode::kUnimplemented);

  strata_plugin_api_v1 table = *NaivePluginApi();
  table.copy_runs = nullptr;
  auto no_copy = Plugin::FromTable(&table, "no-copy-runs");
  ASSERT_TRUE(no_copy.ok()) << no_copy.status();
  auto no_copy_backend = Backend::Create(*no_copy);
  ASSERT_TRUE(no_copy_backend.ok()) << no_copy_backend.status();
  char byte = 0;
  const strata_copy_run run{0, 0, 1};
  EXPECT_EQ((*no_copy_backend)->CopyRuns(nullptr, &byte, &byte, {&run, 1}).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(PluginCopyRunsTest, BackendCopiesRunsAndMapsErrors) {
  auto plugin = NaivePlugin();
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_TRUE((*plugin)->has_copy_runs());
  auto backend = Backend::Create(*plugin);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::string src = "abcdefghij";
  std::string dst(6, '.');
  const strata_copy_run runs[] = {{7, 0, 3}, {0, 4, 2}};
  ASSERT_TRUE((*backend)->CopyRuns(nullptr, dst.data(), src.data(), runs).ok());
  ASSERT_TRUE((*backend)->Synchronize().ok());
  EXPECT_EQ(dst, "hij.ab");
  const strata_copy_run empty{0, 0, 0};
  const absl::Status bad = (*backend)->CopyRuns(nullptr, dst.data(), src.data(), {&empty, 1});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad), AllOf(StartsWith("naive: copy_runs: "), HasSubstr("runs[0]")));
}

}  // namespace
}  // namespace strata
