// `strata replay` as a standalone test binary (cmd_replay.cc + the flag parser), so the
// end-to-end test does not depend on the subcommand table of the `strata` binary.
#include <cstdio>
#include <string>

#include "cmd_replay.h"

namespace strata::cli {
int Fail(const std::string& command, const std::string& reason, int code) {
  std::fprintf(stderr, "strata %s: %s\n", command.c_str(), reason.c_str());
  return code;
}
}  // namespace strata::cli

int main(int argc, char** argv) {
  return strata::cli::RunReplay(strata::cli::Args(argv + 1, argv + argc));
}
