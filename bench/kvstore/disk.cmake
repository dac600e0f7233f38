# G3 disk tier: bandwidth and latency per block size and sync mode; scripts/
# bench_kvstore_disk.sh runs it side by side with db_bench and fio on the same directory.
add_executable(disk_bench kvstore/disk_bench.cc)
target_compile_options(disk_bench PRIVATE -O2)
target_link_libraries(disk_bench PRIVATE strata::kvstore_disk strata::build_flags)
