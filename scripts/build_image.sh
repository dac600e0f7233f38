#!/usr/bin/env bash
# The container image recipe, one stage per subcommand. deploy/docker/Dockerfile runs these stages
# (so the image is built by exactly this script) and CI runs check-runtime-libs on the binaries it
# built (ctest deploy_image_runtime_libs).
#
#   build_image.sh build-deps VARIANT          build stage: Debian dev packages (scripts/setup.sh),
#                                              plus NVIDIA's CUDA toolkit for VARIANT=cuda
#   build_image.sh build VARIANT SRC BUILD     configure and build strata and its plugins (Release)
#   build_image.sh install BUILD PREFIX        PREFIX/bin/strata, PREFIX/lib/strata/libstrata_*.so
#   build_image.sh runtime-deps VARIANT        runtime stage: only deploy/docker/runtime-packages*.txt
#   build_image.sh add-user                    the non-root user strata (uid/gid 10001)
#   build_image.sh check-runtime-libs FILE...  every library FILE... loads comes from a listed package
#   build_image.sh docker VARIANT [TAG]        docker build (where a Docker engine runs)
#
# VARIANT is cpu (CPU plugin only) or cuda (also the CUDA plugin, sm_90).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PKG_DIR="$ROOT/deploy/docker"
CUDA_VERSION_DASHED=13-0  # matches libcublas.so.13 of the CUDA plugin
NVIDIA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64

die() { echo "build_image: $*" >&2; exit 1; }

check_variant() {
  case "${1:-}" in cpu|cuda) ;; *) die "VARIANT must be cpu or cuda, got '${1:-}'" ;; esac
}

# The package list of a variant, comments and blank lines dropped.
packages() {
  local files=("$PKG_DIR/runtime-packages.txt")
  [ "$1" = cuda ] && files+=("$PKG_DIR/runtime-packages-cuda.txt")
  sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "${files[@]}"
}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}

add_nvidia_repo() {
  apt_install ca-certificates curl
  curl -fsSL -o /tmp/cuda-keyring.deb "$NVIDIA_REPO/cuda-keyring_1.1-1_all.deb"
  dpkg -i /tmp/cuda-keyring.deb
  rm -f /tmp/cuda-keyring.deb
}

cmd_build_deps() {
  check_variant "$1"
  "$ROOT/scripts/setup.sh"
  if [ "$1" = cuda ]; then
    add_nvidia_repo
    apt_install "cuda-nvcc-$CUDA_VERSION_DASHED" "cuda-cudart-dev-$CUDA_VERSION_DASHED" \
      "libcublas-dev-$CUDA_VERSION_DASHED"
  fi
}

cmd_build() {
  check_variant "$1"
  local src="$2" build="$3" cuda=OFF
  [ "$1" = cuda ] && cuda=ON
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_CUDA="$cuda" \
    -DSTRATA_BUILD_BENCHMARKS=OFF ${CUDACXX:+-DCMAKE_CUDA_COMPILER="$CUDACXX"}
  local targets=(strata strata_cpu)
  [ "$cuda" = ON ] && targets+=(strata_cuda)
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
}

# The plugin loader looks next to the binary and in ../lib/strata (docs/configuration.md).
cmd_install() {
  local build="$1" prefix="$2"
  install -d "$prefix/bin" "$prefix/lib/strata"
  install -m 0755 "$build/bin/strata" "$prefix/bin/strata"
  local plugin
  for plugin in "$build"/bin/libstrata_*.so; do
    install -m 0644 "$plugin" "$prefix/lib/strata/"
  done
}

cmd_runtime_deps() {
  check_variant "$1"
  [ "$1" = cuda ] && add_nvidia_repo
  mapfile -t pkgs < <(packages "$1")
  apt_install "${pkgs[@]}"
  apt-get purge -y -qq curl 2>/dev/null || true
  rm -rf /var/lib/apt/lists/*
}

cmd_add_user() {
  groupadd --system --gid 10001 strata
  useradd --system --uid 10001 --gid strata --home-dir /nonexistent --no-create-home \
    --shell /usr/sbin/nologin strata
  install -d -o strata -g strata /var/cache/strata
}

# Candidate paths of a library as dpkg may have recorded it: before or after the /usr merge, and
# behind alternatives symlinks.
candidates() {
  local lib="$1"
  printf '%s\n' "$lib" "$(readlink -f "$lib")" "/usr$lib" "${lib#/usr}"
}

# Libraries a file loads: its ldd closure, plus what it dlopen()s by soname (the CPU plugin loads
# OpenBLAS that way; see plugins/cpu/src/cpu_blas.cc). An unresolved library prints MISSING.
loaded_libs() {
  local file="$1" out
  out=$(ldd "$file")
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out"
  if grep -aqF 'libopenblas.so.0' "$file"; then
    ldconfig -p | awk '$1 == "libopenblas.so.0" {print $NF; exit}'
  fi
  if grep -q 'not found' <<<"$out"; then
    grep 'not found' <<<"$out" >&2
    echo MISSING
  fi
}

cmd_check_runtime_libs() {
  [ $# -ge 1 ] || die "check-runtime-libs needs the built binaries"
  local variant=cpu file lib path pkg failed=0
  for file in "$@"; do
    [ -f "$file" ] || die "$file does not exist (build it first)"
    case "$(basename "$file")" in libstrata_cuda.so) variant=cuda ;; esac
  done
  # A set, not a `printf | grep -q` pipeline: under pipefail that fails at random when grep
  # exits before printf has written everything (SIGPIPE), seen as a flaky "does not install".
  declare -A allowed=()
  while IFS= read -r pkg; do allowed["$pkg"]=1; done < <(packages "$variant")
  mapfile -t libs < <(for file in "$@"; do loaded_libs "$file"; done | sort -u)
  [ "${#libs[@]}" -gt 0 ] || die "found no libraries (is ldd working?)"
  # One dpkg-query for every candidate path: "package:arch: path" per path it knows.
  declare -A owner=()
  while IFS= read -r line; do
    owner["${line#*: }"]="${line%%:*}"
  done < <(for lib in "${libs[@]}"; do candidates "$lib"; done | sort -u |
           xargs dpkg-query -S 2>/dev/null || true)
  for lib in "${libs[@]}"; do
    if [ "$lib" = MISSING ]; then failed=1; continue; fi
    pkg=""
    while IFS= read -r path; do
      if [ -n "${owner[$path]:-}" ]; then pkg="${owner[$path]}"; break; fi
    done < <(candidates "$lib")
    # CUDA libraries installed outside dpkg (a runfile toolkit) map to NVIDIA's package names.
    case "$pkg:$(basename "$lib")" in
      :libcublas.so.*|:libcublasLt.so.*) pkg="libcublas-$CUDA_VERSION_DASHED" ;;
    esac
    if [ -z "$pkg" ]; then
      echo "build_image: $lib belongs to no package" >&2; failed=1
    elif [ -z "${allowed[$pkg]:-}" ]; then
      echo "build_image: $lib comes from $pkg, which the $variant runtime image does not" \
           "install (add it to deploy/docker/runtime-packages*.txt)" >&2
      failed=1
    fi
  done
  [ "$failed" -eq 0 ] || exit 1
  echo "build_image: all ${#libs[@]} libraries of $* come from the $variant runtime packages"
}

cmd_docker() {
  check_variant "$1"
  local tag="${2:-strata:$1-dev}"
  docker build -f "$PKG_DIR/Dockerfile" --build-arg VARIANT="$1" -t "$tag" "$ROOT"
}

sub="${1:-}"
shift || true
case "$sub" in
  build-deps) cmd_build_deps "$@" ;;
  build) cmd_build "$@" ;;
  install) cmd_install "$@" ;;
  runtime-deps) cmd_runtime_deps "$@" ;;
  add-user) cmd_add_user ;;
  check-runtime-libs) cmd_check_runtime_libs "$@" ;;
  docker) cmd_docker "$@" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
