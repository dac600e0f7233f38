#!/usr/bin/env bash
# G3 disk tier vs fio and db_bench on the same directory, one run, side by side.
#
#   scripts/bench_kvstore_disk.sh [build_dir=build] [dir=build_dir/disk_bench_data] [total=1G]
#                                 [rounds=3]
# Needs build_dir/bin/disk_bench (ninja disk_bench), fio and db_bench (rocksdb-tools).
#
# Per block size (256 KiB, 2 MiB), `total` bytes each:
#   fio       sequential write (end_fsync), sequential read, then random read (every block once,
#             random order) of one file, psync, queue depth 1, one job, bs = block size,
#             O_DIRECT when the file system takes it (else buffered; the header says which)
#   strata    disk_bench: Puts of every block + Flush, then Gets after a reopen (store order =
#             sequential slots, then every block once in random order), one blocking request
#             at a time like fio's psync at queue depth 1; then "churn": the same Puts into a
#             tier of a quarter of the size (eviction on 3 of 4 Puts)
#   db_bench  fillseq (integrated BlobDB, no WAL, no compression, value = block size), then
#             readrandom of every key with O_DIRECT reads (the previous G3 design's engine)
# Like for like: the tier's write / sequential read / random read are divided by fio's write /
# read / randread of the same block size and queue depth.
# fio and the default tier (sync=wal, page-aligned buffers, huge-page staging) run interleaved
# `rounds` times (fio write, fio read, fio randread, strata, ...) and each reports its median,
# so that both see the same disk and the same background load; the ratios are strata median /
# fio median. The other tier configurations (sync=none; unaligned buffers; huge-page staging
# off) and db_bench run once. MB/s = 2^20 B/s. Everything it writes is removed at the end.
set -euo pipefail
BUILD=${1:-build}
DIR=${2:-$BUILD/disk_bench_data}
TOTAL=${3:-1G}
ROUNDS=${4:-3}
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

# fio bandwidth (MB/s) and completion-latency p50/p99 (us) for rw=write|read|randread.
fio_run() {
  local rw=$1 bs=$2
  fio --name=seq --directory="$DIR/fio" --filename=data --rw="$rw" --bs="$bs" --size="$total_bytes" \
      --direct=$DIRECT --ioengine=psync --iodepth=1 --numjobs=1 --end_fsync=1 \
      --output-format=json 2>/dev/null |
    python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]["'"${rw#rand}"'"]
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
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# key=value from a disk_bench line.
val() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }

strata_row() {  # label, disk_bench line, fio write, read and randread MB/s
  local l=$2
  echo "| $1 | $(val write_MBps "$l") | $(ratio "$(val write_MBps "$l")" "$3") |" \
       "$(val write_p50_us "$l") / $(val write_p99_us "$l") | $(val seq_read_MBps "$l") |" \
       "$(ratio "$(val seq_read_MBps "$l")" "$4") | $(val read_MBps "$l") |" \
       "$(ratio "$(val read_MBps "$l")" "$5") | $(val read_p50_us "$l") / $(val read_p99_us "$l") |" \
       "$(val churn_write_MBps "$l") |"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# dir $DIR on $(df --output=source "$DIR" | tail -1) ($(df --output=fstype "$DIR" | tail -1)); fio direct=$DIRECT; $TOTAL per run; $ROUNDS interleaved rounds; MB/s = 2^20 B/s"
echo "# RocksDB $(dpkg-query -W -f='${Version}' librocksdb-dev 2>/dev/null), fio $(fio --version)"
for bs in $((256 << 10)) $((2 << 20)); do
  n=$((total_bytes / bs))
  fw_all="" fr_all="" fx_all="" st_lines=() lat_all=("" "" "" "")
  for ((r = 0; r < ROUNDS; r++)); do
    rm -rf "$DIR/fio" && mkdir -p "$DIR/fio"
    read -r fw fw50 fw99 <<<"$(fio_run write "$bs")"
    read -r fr fr50 fr99 <<<"$(fio_run read "$bs")"
    read -r fx fx50 fx99 <<<"$(fio_run randread "$bs")"
    rm -rf "$DIR/fio"
    fw_all+=" $fw" fr_all+=" $fr" fx_all+=" $fx"
    lat_all[0]+=" $fw50" lat_all[1]+=" $fw99" lat_all[2]+=" $fx50" lat_all[3]+=" $fx99"
    st_lines+=("$("$BENCH" "$DIR" "$bs" "$total_bytes" wal aligned staged)")
  done
  fw=$(median <<<"$fw_all") fr=$(median <<<"$fr_all") fx=$(median <<<"$fx_all")
  for i in 0 1 2 3; do lat[$i]=$(median <<<"${lat_all[$i]}"); done
  # Each of the tier's columns is the median of its rounds.
  st_w=$(for l in "${st_lines[@]}"; do val write_MBps "$l"; done | median)
  st_r=$(for l in "${st_lines[@]}"; do val read_MBps "$l"; done | median)
  st_s=$(for l in "${st_lines[@]}"; do val seq_read_MBps "$l"; done | median)
  st_c=$(for l in "${st_lines[@]}"; do val churn_write_MBps "$l"; done | median)
  none_line=$("$BENCH" "$DIR" "$bs" "$total_bytes" none aligned staged)
  unaligned_line=$("$BENCH" "$DIR" "$bs" "$total_bytes" wal unaligned staged)
  unstaged_line=$("$BENCH" "$DIR" "$bs" "$total_bytes" wal aligned unstaged)
  rm -rf "$DIR/db_bench"
  dw=$(db_bench_run fillseq "$bs" "$n")
  dr=$(db_bench_run readrandom "$bs" "$n")
  rm -rf "$DIR/db_bench"
  echo
  echo "block $((bs >> 10)) KiB ($n blocks)"
  echo
  echo "| what | write MB/s | write/fio | write p50/p99 us | seq read MB/s | seq read/fio | random read MB/s | random read/fio | random read p50/p99 us | churn write MB/s |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  echo "| fio psync QD 1 (direct=$DIRECT), median of $ROUNDS (write$fw_all; read$fr_all; randread$fx_all; latencies: medians of the rounds) | $fw | 1.00 | ${lat[0]} / ${lat[1]} | $fr | 1.00 | $fx | 1.00 | ${lat[2]} / ${lat[3]} | |"
  echo "| **strata G3 sync=wal, aligned, median of $ROUNDS** | **$st_w** | **$(ratio "$st_w" "$fw")** | | **$st_s** | **$(ratio "$st_s" "$fr")** | **$st_r** | **$(ratio "$st_r" "$fx")** | | $st_c |"
  for ((r = 0; r < ROUNDS; r++)); do
    strata_row "strata G3 sync=wal, aligned, round $((r + 1))" "${st_lines[$r]}" "$fw" "$fr" "$fx"
  done
  strata_row "strata G3 sync=none, aligned" "$none_line" "$fw" "$fr" "$fx"
  strata_row "strata G3 sync=wal, unaligned buffers" "$unaligned_line" "$fw" "$fr" "$fx"
  strata_row "strata G3 sync=wal, aligned, huge-page staging off" "$unstaged_line" "$fw" "$fr" "$fx"
  echo "| db_bench fillseq / readrandom (BlobDB, no WAL) | $dw | $(ratio "${dw:-0}" "$fw") | | | | $dr | $(ratio "${dr:-0}" "$fx") | | |"
done
