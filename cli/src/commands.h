#pragma once
// Subcommands of the `strata` binary. Each takes the arguments after its name and returns the
// process exit code: 0 success, 1 runtime failure, 2 usage error (one-line reason on stderr).
#include <string>
#include <vector>

namespace strata::cli {

using Args = std::vector<std::string>;

int RunGenerate(const Args& args);
int RunModel(const Args& args);       // `strata model init ...`
int RunPluginTest(const Args& args);  // conformance suite against the CPU reference
int RunRouter(const Args& args);      // the router process
int RunWorker(const Args& args);      // a prefill / decode / mixed worker process
int RunUp(const Args& args);          // a whole cluster on localhost (cmd_up.cc)
int RunReplay(const Args& args);      // open-loop trace replay (cmd_replay.cc)
int RunKvstore(const Args& args);     // a remote KV store daemon, tier G4 (cmd_kvstore.cc)
int RunSim(const Args& args);         // discrete-event cluster simulation (cmd_sim.cc)
int RunPlan(const Args& args);        // prefill:decode pool sizing in the simulator (cmd_sim.cc)
int RunProfile(const Args& args);     // fit a worker's latency models (cmd_profile.cc)

// Prints "strata <cmd>: <reason>" to stderr and returns `code`.
int Fail(const std::string& command, const std::string& reason, int code);

}  // namespace strata::cli
