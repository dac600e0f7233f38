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

}  // namespace
}  // namespace strata
