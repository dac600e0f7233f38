#!/usr/bin/env bash
# Runs a GPU command under compute-sanitizer's memcheck and racecheck; any error either tool
# reports fails this script (exit 1), as does the command failing under them.
#   [TOOLS="memcheck racecheck"] scripts/compute_sanitize.sh COMMAND [ARGS...]
# Without compute-sanitizer on PATH (or in /usr/local/cuda/bin) it says so and fails.
set -uo pipefail
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -z $sanitizer ]]; then
  echo "compute-sanitizer: not found" >&2
  exit 1
fi
rc=0
for tool in ${TOOLS:-memcheck racecheck}; do
  log=$(mktemp)
  "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 10 "$@" >"$log" 2>&1
  status=$?
  # The tool's own summary line, and the first reports when there are any.
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
  if ((status != 0)); then
    echo "compute-sanitizer $tool: FAILED (exit $status) ${summary}"
    grep -v -E "^\s*$|PASS" "$log" | head -n 40
    rc=1
  else
    echo "compute-sanitizer $tool: clean ${summary}"
  fi
  rm -f "$log"
done
exit $rc
