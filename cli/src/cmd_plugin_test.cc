// `strata plugin-test`: the plugin conformance suite (strata/plugin/conformance.h) from the
// command line. Exit 0 iff every case passes, 1 when a plugin cannot be loaded or a case
// fails, 2 on bad flags.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "args.h"
#include "commands.h"
#include "strata/plugin/conformance.h"
#include "strata/plugin/naive_plugin.h"
#include "strata/plugin/plugin.h"

namespace strata::cli {
namespace {

constexpr char kCommand[] = "plugin-test";

struct Flags {
  std::string plugin;
  std::string reference = "cpu";
  std::string config;
  std::vector<std::string> ops;
  std::string case_filter;
  long long seed = static_cast<long long>(ConformanceOptions{}.seed);
  double f32_tolerance = ConformanceOptions{}.f32_tolerance;
  double half_tolerance = ConformanceOptions{}.half_tolerance;
  bool verbose = false;
};

ArgParser MakeParser(Flags* f) {
  ArgParser parser(
      "strata plugin-test --plugin PATH|NAME [--reference cpu|naive|PATH] [--op NAME] "
      "[--seed N] [--verbose]",
      "Runs every op of a plugin on random inputs and compares it with a reference backend.\n"
      "NAME is looked up as libstrata_NAME.so in $STRATA_PLUGIN_DIR, next to this binary and in\n"
      "../lib/strata; \"naive\" is the built-in double-precision reference.\nOps: " +
          absl::StrJoin(ConformanceOps(), ", ") + ".");
  parser.AddString("--plugin", &f->plugin, "the plugin under test: a .so path or a name");
  parser.AddString("--reference", &f->reference, "the backend to compare with");
  parser.AddString("--config", &f->config, "JSON config passed to the plugin's create()");
  parser.AddRepeated("--op", &f->ops, "run only this op (an ABI entry name, e.g. gemm)");
  parser.AddString("--case", &f->case_filter,
                   "run only the cases whose name contains this (e.g. 'V=128256')");
  parser.AddInt64("--seed", &f->seed, "seed of the random inputs");
  parser.AddDouble("--f32-tolerance", &f->f32_tolerance,
                   "max normalized error when both backends are fp32");
  parser.AddDouble("--half-tolerance", &f->half_tolerance,
                   "max normalized error when either backend stores bf16/f16");
  parser.AddBool("--verbose", &f->verbose, "also print each case's candidate time");
  return parser;
}

absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(const std::string& name,
                                                     const std::string& config) {
  absl::StatusOr<std::shared_ptr<Plugin>> plugin =
      name == "naive" ? NaivePlugin() : LoadPlugin(name);
  if (!plugin.ok()) return plugin.status();
  return Backend::Create(*std::move(plugin), config);
}

std::string DescribeBackend(const Backend& b) {
  const strata_backend_info& info = b.info();
  return absl::StrFormat("%s (%s) on %s; weights %s, activations %s, kv %s%s",
                         info.name ? info.name : "?", b.plugin().origin(),
                         info.device_name ? info.device_name : "?", DtypeName(info.weight_dtype),
                         DtypeName(info.act_dtype), DtypeName(info.kv_dtype),
                         b.plugin().has_moe() ? "; moe" : "; no moe");
}

void PrintReport(const ConformanceReport& report, bool verbose) {
  size_t op_width = 2, case_width = 4;
  for (const CaseResult& c : report.cases) {
    op_width = std::max(op_width, c.op.size());
    case_width = std::max(case_width, c.name.size());
  }
  const int ow = static_cast<int>(op_width), cw = static_cast<int>(case_width);
  std::printf("%-*s  %-*s  %10s  %9s  %s%s\n", ow, "OP", cw, "CASE", "MAX ERROR", "TOLERANCE",
              "RESULT", verbose ? "  TIME" : "");
  for (const CaseResult& c : report.cases) {
    if (c.skipped) {
      std::printf("%-*s  %-*s  %10s  %9s  SKIP  (%s)\n", ow, c.op.c_str(), cw, c.name.c_str(), "-",
                  "-", c.error.c_str());
      continue;
    }
    const std::string time = verbose ? absl::StrFormat("  %.1f ms", c.candidate_seconds * 1e3) : "";
    std::printf("%-*s  %-*s  %10.3e  %9.1e  %s%s\n", ow, c.op.c_str(), cw, c.name.c_str(),
                c.max_error, c.tolerance, c.passed ? "PASS" : "FAIL", time.c_str());
    if (!c.passed && !c.error.empty()) std::printf("    %s\n", c.error.c_str());
  }
  std::printf("%d passed, %d failed", report.num_passed(), report.num_failed());
  if (report.num_skipped() > 0) std::printf(", %d skipped", report.num_skipped());
  std::printf("\n");
}

}  // namespace

int RunPluginTest(const Args& args) {
  Flags flags;
  ArgParser parser = MakeParser(&flags);
  if (absl::Status st = parser.Parse(args); !st.ok()) {
    return Fail(kCommand, std::string(st.message()), 2);
  }
  if (parser.help_requested()) {
    std::printf("%s", parser.Help().c_str());
    return 0;
  }
  if (flags.plugin.empty()) return Fail(kCommand, "--plugin is required (see --help)", 2);
  for (const std::string& op : flags.ops) {
    const auto& known = ConformanceOps();
    if (std::find(known.begin(), known.end(), op) == known.end()) {
      return Fail(kCommand,
                  absl::StrCat("unknown --op '", op, "'; ops: ", absl::StrJoin(known, ", ")), 2);
    }
  }
  auto candidate = OpenBackend(flags.plugin, flags.config);
  if (!candidate.ok()) return Fail(kCommand, std::string(candidate.status().message()), 1);
  auto reference = OpenBackend(flags.reference, "");
  if (!reference.ok()) {
    return Fail(kCommand, absl::StrCat("reference: ", reference.status().message()), 1);
  }
  std::printf("candidate: %s\nreference: %s\n\n", DescribeBackend(**candidate).c_str(),
              DescribeBackend(**reference).c_str());
  ConformanceOptions options;
  options.seed = static_cast<uint64_t>(flags.seed);
  options.ops = flags.ops;
  options.case_filter = flags.case_filter;
  options.f32_tolerance = flags.f32_tolerance;
  options.half_tolerance = flags.half_tolerance;
  auto report = RunConformance(**candidate, **reference, options);
  if (!report.ok()) return Fail(kCommand, std::string(report.status().message()), 2);
  PrintReport(*report, flags.verbose);
  return report->all_passed() ? 0 : 1;
}

}  // namespace strata::cli
