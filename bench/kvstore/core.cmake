# kvstore core benchmarks (not tests): scripts/bench_kvstore_host.sh, bench_kvstore_hitrate.sh.
# G2 Put/Get bandwidth against memcpy on the same buffers.
add_executable(kvstore_host_tier_bench ${CMAKE_CURRENT_LIST_DIR}/host_tier_bench.cc)
target_compile_options(kvstore_host_tier_bench PRIVATE -O3)
target_link_libraries(kvstore_host_tier_bench PRIVATE strata::kvstore benchmark::benchmark
                      strata::build_flags)

# Prefix hit rate of the eviction policies on a Mooncake trace against Belady's optimum.
add_executable(kvstore_hit_rate ${CMAKE_CURRENT_LIST_DIR}/hit_rate.cc)
target_compile_options(kvstore_hit_rate PRIVATE -O2)
target_link_libraries(kvstore_hit_rate PRIVATE strata::kvstore strata::replay absl::flat_hash_map
                      absl::flat_hash_set absl::str_format strata::build_flags)

# The engine's write-through KV offload: no offload vs a sync per block vs the staging ring, and
# into a real G2 staged or copied straight into reserved slots.
add_executable(kv_offload_bench ${CMAKE_CURRENT_LIST_DIR}/offload_bench.cc)
target_compile_options(kv_offload_bench PRIVATE -O2)
target_link_libraries(kv_offload_bench PRIVATE strata::engine strata::kvstore strata::build_flags)
add_dependencies(kv_offload_bench strata_cpu)
