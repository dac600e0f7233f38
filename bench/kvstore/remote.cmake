# G4 put/get bandwidth through RemoteTier against a `strata kvstore` daemon in another process;
# scripts/bench_kvstore_remote.sh runs it side by side with ucx_perftest put_bw / get_bw.
add_executable(kvstore_remote_bench ${CMAKE_CURRENT_SOURCE_DIR}/kvstore/remote_bench.cc)
target_compile_options(kvstore_remote_bench PRIVATE -O3)
target_link_libraries(kvstore_remote_bench PRIVATE strata::kvstore_remote strata::build_flags)
