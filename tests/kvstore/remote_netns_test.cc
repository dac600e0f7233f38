// Block hashes agree between separate processes on separate network-namespace "hosts": the
// probe runs twice under `unshare --net` (each in a fresh namespace with only its own loopback)
// and once plainly, and every run prints the chain this process computes. Skipped where
// unshare is not permitted.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "strata/common/block_hash.h"

namespace strata {
namespace {

const char kProbe[] = STRATA_BINARY_DIR "/bin/kvstore_remote_hash_probe";

// stdout of `command` and its exit status.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return {"", -1};
  std::array<char, 256> buf;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  return {out, ::pclose(p)};
}

std::string Expected() {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 100; ++i) tokens.push_back(i * 7919 % 32000);
  std::string out;
  for (BlockHash h : HashBlockChain(BlockHashSeed("strata-netns-probe"), tokens, 16)) {
    char line[32];
    std::snprintf(line, sizeof(line), "%016" PRIx64 "\n", h);
    out += line;
  }
  return out;
}

TEST(RemoteNetnsTest, HashesAgreeAcrossProcessesAndNetworkNamespaces) {
  const std::string expected = Expected();
  ASSERT_EQ(std::count(expected.begin(), expected.end(), '\n'), 6);  // 100 / 16 full blocks
  const auto plain = RunCommand(kProbe);
  ASSERT_EQ(plain.second, 0);
  EXPECT_EQ(plain.first, expected);
  // Are new network namespaces allowed here (root or user namespaces)?
  const auto probe_ns = RunCommand("unshare --net true 2>/dev/null");
  if (probe_ns.second != 0) GTEST_SKIP() << "unshare --net is not permitted here";
  // Each run is its own host: a namespace whose network is nothing but its own loopback, and
  // whose inode differs from ours.
  const auto ns1 =
      RunCommand(std::string("unshare --net sh -c 'readlink /proc/self/ns/net; ") + kProbe + "'");
  const auto ns2 =
      RunCommand(std::string("unshare --net sh -c 'readlink /proc/self/ns/net; ") + kProbe + "'");
  const auto self = RunCommand("readlink /proc/self/ns/net");
  ASSERT_EQ(ns1.second, 0);
  ASSERT_EQ(ns2.second, 0);
  const auto split = [](const std::string& s) {
    const size_t nl = s.find('\n');
    return std::make_pair(s.substr(0, nl + 1), s.substr(nl + 1));
  };
  const auto [ns1_id, ns1_hashes] = split(ns1.first);
  const auto [ns2_id, ns2_hashes] = split(ns2.first);
  EXPECT_NE(ns1_id, self.first);
  EXPECT_NE(ns2_id, self.first);
  EXPECT_NE(ns1_id, ns2_id);
  EXPECT_EQ(ns1_hashes, expected);
  EXPECT_EQ(ns2_hashes, expected);
}

}  // namespace
}  // namespace strata
