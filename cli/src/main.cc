// The one strata binary: every role and tool is a subcommand.
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "commands.h"

namespace strata::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args&);
};

constexpr Command kCommands[] = {
    {"up", "start a cluster (router + workers) on localhost and serve until Ctrl-C", RunUp},
    {"router", "run the router: OpenAI API, worker registry, placement", RunRouter},
    {"worker", "run a prefill, decode or mixed worker", RunWorker},
    {"replay", "replay a request trace open-loop against an OpenAI server: SLO attainment, goodput",
     RunReplay},
    {"kvstore", "run a remote KV store daemon (tier G4) that holds blocks for other nodes",
     RunKvstore},
    {"sim", "simulate a cluster replaying a trace with the router's placement code", RunSim},
    {"plan", "search prefill:decode pool sizes in the simulator for the highest goodput", RunPlan},
    {"profile", "measure a worker's prefill/decode times and fit the router's latency models",
     RunProfile},
    {"generate", "generate completions for prompts with the local engine", RunGenerate},
    {"model", "model tools: `model init` writes a preset checkpoint", RunModel},
    {"plugin-test", "run the plugin conformance suite against the CPU reference", RunPluginTest},
};

void PrintUsage(std::FILE* out) {
  std::fprintf(out,
               "usage: strata <command> [flags]\n\n"
               "strata: a disaggregated LLM serving cluster in one native binary.\n\n"
               "commands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-14s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun `strata <command> --help` for a command's flags.\n");
}

}  // namespace

int Fail(const std::string& command, const std::string& reason, int code) {
  std::fprintf(stderr, "strata %s: %s\n", command.c_str(), reason.c_str());
  return code;
}

}  // namespace strata::cli

int main(int argc, char** argv) {
  using namespace strata::cli;
  // Debian's abseil is built without NDEBUG, so every absl::Mutex::Lock would also run the
  // lock-order cycle detector (seen in router profiles under load). Deadlocks are caught by the
  // TSan / sanitizer runs instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    PrintUsage(stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("strata 0.1.0\n");
    return 0;
  }
  Args args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (argv[1] == std::string(c.name)) return c.run(args);
  }
  std::fprintf(stderr, "strata: unknown command '%s' (see strata --help)\n", argv[1]);
  return 2;
}
