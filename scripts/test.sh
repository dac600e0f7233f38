#!/usr/bin/env bash
# Builds strata and runs every test. What `.ci/run` and the README's second command run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build}"
# Test clients (the official `openai` package, and the vLLM and SGLang routers that
# router_interop_test puts in front of strata workers) live in a venv beside the build, never in
# the product. The routers are pinned: their probes and request fields change between releases.
TEST_PY_MODULES="openai, kubernetes_validate, jsonschema, vllm_router, sglang_router"
if [ ! -x "$BUILD_DIR/pyenv/bin/python" ] || ! "$BUILD_DIR/pyenv/bin/python" -c "import $TEST_PY_MODULES" 2>/dev/null; then
  python3 -m venv "$BUILD_DIR/pyenv"
  "$BUILD_DIR/pyenv/bin/pip" install --quiet --disable-pip-version-check "openai>=1.40" \
    "kubernetes-validate>=1.28" "jsonschema>=4" "vllm-router==0.1.17" "sglang-router==0.3.2"
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_TEST_PYTHON="$PWD/$BUILD_DIR/pyenv/bin/python"
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
# The sanitizers' CI subset (scripts/sanitize.sh --ci), each in its own build tree: ASan + UBSan
# over the parsers' fuzz corpora, the HTTP server, the OpenAI front end and the router's paths;
# TSan over the HTTP server and the control-plane stubs.
STRATA_SKIP_SETUP=1 BUILD_DIR="$BUILD_DIR-asan" scripts/sanitize.sh asan --ci
STRATA_SKIP_SETUP=1 BUILD_DIR="$BUILD_DIR-tsan" scripts/sanitize.sh tsan --ci
