#!/usr/bin/env bash
# Builds strata (if needed) and runs the main job on the built-in model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -x "$BUILD_DIR/bin/strata" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" --target strata >/dev/null
exec "$BUILD_DIR/bin/strata" "$@"
