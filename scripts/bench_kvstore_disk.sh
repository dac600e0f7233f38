#!/usr/bin/env bash
# G3 disk tier vs fio and db_bench on the same directory, one run, side by side.
#
#   scripts/bench_kvstore_disk.sh [build_dir=build] [dir=build_dir/disk_bench_data] [total=1G]
# Needs build_dir/bin/disk_bench (ninja disk_bench), fio and db_bench (rocksdb-tools).
#
# Per block size (256 KiB, 2 MiB), `total` bytes each:
#   fio       sequential write (end_fsync) then sequential read of one file, psync, queue depth
#             1, O_DIRECT when the file system takes it (else buffered; the header says which)
#   db_bench  fillseq (integrated BlobDB, no WAL, no compression, value = block size), then
#             readrandom of every key with O_DIRECT reads
#   strata    disk_bench: Puts of every block + Flush, then random-order Gets after dropping
#             the files from the page cache; then "churn": the same Puts into a tier of a
#             quarter of the size (eviction on 3 of 4 Puts); layouts blob/sst, sync none/wal
# MB/s = 2^20 B/s; ratios are strata / fio. Everything it writes is removed at the end.
set -euo pipefail
BUILD=${1:-build}
DIR=${2:-$BUILD/disk_bench_data}
TOTAL=${3:-1G}
BENCH=$BUILD/bin/disk_bench
[[ -x $BENCH ]] || { echo "missing $BENCH (ninja -C $BUILD disk_bench)" >&2; exit 1; }
command -v fio >/dev/null || { echo "missing fio" >&2; exit 1; }
command -v db_bench >/dev/null || { echo "missing db_bench (rocksdb-tools)" >&2; exit 1; }
mkdir -p "$DIR"
trap 'rm -rf "$DIR/fio" "$DIR/db_bench" "$DIR/strata_disk_bench"' EXIT
total_bytes=$(numfmt --from=iec "$TOTAL")

# O_DIRECT if the file system supports it.
DIRECT=1
mkdir -p "$DIR/fio"
if ! fio --name=probe --directory="$DIR/fio" --rw=write --bs=4k --size=64k --direct=1 \
    --output-format=terse >/dev/null 2>&1; then DIRECT=0; fi

# fio bandwidth (MB/s) and completion-latency p50/p99 (us) for rw=write|read.
fio_run() {
  local rw=$1 bs=$2
  fio --name=seq --directory="$DIR/fio" --filename=data --rw="$rw" --bs="$bs" --size="$total_bytes" \
      --direct=$DIRECT --ioengine=psync --end_fsync=1 --output-format=json 2>/dev/null |
    python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]["'"$rw"'"]
p = j["clat_ns"]["percentile"]
print("%.0f %.0f %.0f" % (j["bw_bytes"] / 2**20, p["50.000000"] / 1e3, p["99.000000"] / 1e3))'
}

# db_bench MB/s for one benchmark (fillseq creates the db, readrandom reuses it).
db_bench_run() {
  local what=$1 bs=$2 n=$3 extra=()
  [[ $what == readrandom ]] && extra=(--use_existing_db=1 --use_direct_reads=$([[ $DIRECT == 1 ]] && echo true || echo false) --reads="$n")
  db_bench --db="$DIR/db_bench" --benchmarks="$what" --num="$n" --value_size="$bs" --key_size=8 \
      --compression_type=none --enable_blob_files=true --min_blob_size=$((bs / 2)) \
      --blob_compression_type=none --disable_wal=1 --write_buffer_size=$((64 << 20)) \
      --bloom_bits=10 --cache_size=$((8 << 20)) "${extra[@]}" 2>/dev/null |
    sed -n "s/^$what .* \([0-9.]*\) MB\/s.*/\1/p" | head -1
}

ratio() { python3 -c "print('%.2f' % ($1 / $2 if $2 else 0))"; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p')"
echo "# dir $DIR on $(df --output=source "$DIR" | tail -1) ($(df --output=fstype "$DIR" | tail -1)); fio direct=$DIRECT; $TOTAL per run; MB/s = 2^20 B/s"
echo "# RocksDB $(dpkg-query -W -f='${Version}' librocksdb-dev 2>/dev/null), fio $(fio --version)"
for bs in $((256 << 10)) $((2 << 20)); do
  n=$((total_bytes / bs))
  rm -rf "$DIR/fio" && mkdir -p "$DIR/fio"
  read -r fw fw50 fw99 <<<"$(fio_run write "$bs")"
  read -r fr fr50 fr99 <<<"$(fio_run read "$bs")"
  rm -rf "$DIR/fio" "$DIR/db_bench"
  dw=$(db_bench_run fillseq "$bs" "$n")
  dr=$(db_bench_run readrandom "$bs" "$n")
  rm -rf "$DIR/db_bench"
  echo
  echo "block $((bs >> 10)) KiB ($n blocks)"
  echo
  echo "| what | write MB/s | write/fio | write p50/p99 us | read MB/s | read/fio | read p50/p99 us | churn write MB/s |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  echo "| fio seq (direct=$DIRECT) | $fw | 1.00 | $fw50 / $fw99 | $fr | 1.00 | $fr50 / $fr99 | |"
  echo "| db_bench fillseq / readrandom (blob, no WAL) | $dw | $(ratio "${dw:-0}" "$fw") | | $dr | $(ratio "${dr:-0}" "$fr") | | |"
  for cfg in "blob none" "blob wal" "sst none"; do
    set -- $cfg
    line=$("$BENCH" "$DIR" "$bs" "$total_bytes" "$1" "$2")
    val() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
    echo "| strata G3 $1, sync=$2 | $(val write_MBps) | $(ratio "$(val write_MBps)" "$fw") |" \
         "$(val write_p50_us) / $(val write_p99_us) | $(val read_MBps) | $(ratio "$(val read_MBps)" "$fr") |" \
         "$(val read_p50_us) / $(val read_p99_us) | $(val churn_write_MBps) |"
  done
done
