#!/usr/bin/env bash
# Packs binaries built here, with every non-glibc shared library they load, into one tarball
# that runs on the GPU machine (newer glibc, none of this project's Debian packages):
#
#   scripts/pack_carry.sh OUT.tar.xz BINARY...
#
# The tarball holds bin/ (the binaries, debug info stripped) and lib/ (their libraries, plus
# the OpenBLAS and Fortran runtime that the CPU plugin dlopens). On the other machine:
#   tar -C DIR -xJf OUT.tar.xz && export LD_LIBRARY_PATH=DIR/lib UCX_MODULE_DIR=DIR/lib/ucx
# glibc itself and the CUDA driver / cuBLAS libraries stay out: the GPU machine has its own.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n "2,10p" "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
out=$1
shift
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for f in "$@"; do
  [[ -f $f ]] || { echo "pack_carry: no such file: $f" >&2; exit 1; }
  cp "$f" "$stage/bin/"
done
strip --strip-debug "$stage"/bin/*
{ for f in "$stage"/bin/*; do ldd "$f"; done
  ldconfig -p | awk '/libopenblas.so.0|libgfortran.so.5|libquadmath.so.0/ && /x86-64/ {print "x => " $NF}'
} | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libcuda|libcublas|libcublasLt)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
# UCX loads some transports as modules from its build-time directory; carry the one that needs
# nothing missing there (cma: cross-memory attach) for UCX_MODULE_DIR=DIR/lib/ucx.
if compgen -G "$stage/lib/libucp.so*" >/dev/null && [[ -d /usr/lib/x86_64-linux-gnu/ucx ]]; then
  mkdir -p "$stage/lib/ucx"
  cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 "$stage/lib/ucx/" 2>/dev/null || true
fi
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" bin lib
ls -la "$out"
