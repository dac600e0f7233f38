#!/usr/bin/env bash
# Installs every Debian package strata's build and tests need. Idempotent; run as root.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libabsl-dev nlohmann-json3-dev libxxhash-dev libssl-dev libpcre2-dev libicu-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libucx-dev ucx-utils libyaml-cpp-dev prometheus
  librocksdb-dev rocksdb-tools fio
  python3 python3-venv curl
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages (${missing[*]}); run as root: sudo $0" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
