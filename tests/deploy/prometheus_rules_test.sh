#!/usr/bin/env bash
# The shipped Prometheus files: scrape config and rules load, and the rules' unit tests pass.
#   prometheus_rules_test.sh PROMTOOL SOURCE_DIR
set -euo pipefail
promtool="$1"
dir="$2/deploy/prometheus"
"$promtool" check config "$dir/prometheus.yaml"
"$promtool" check rules "$dir/strata-rules.yaml"
"$promtool" test rules "$dir/tests/strata-rules.test.yaml"
