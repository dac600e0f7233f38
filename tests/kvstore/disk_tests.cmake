# G3 disk tier tests (owned with kvstore/disk.cmake); run with `ctest -L kvstore_disk`.
strata_cc_test(NAME kvstore_disk_test
  SRCS disk_tier_test.cc disk_tier_file_test.cc disk_corrupt_index_test.cc
  DEPS strata::kvstore_disk
  LABELS kvstore_disk)
target_include_directories(kvstore_disk_test PRIVATE ${PROJECT_SOURCE_DIR}/kvstore/src/disk)

# Crash safety: disk_crash_writer is SIGKILLed mid-write by kvstore_disk_crash_test, which
# reopens its tier and checks it (scripts/soak_kvstore_crash.sh runs 100+ iterations).
add_executable(disk_crash_writer disk_crash_writer.cc)
target_link_libraries(disk_crash_writer PRIVATE strata::kvstore_disk strata::build_flags)
strata_cc_test(NAME kvstore_disk_crash_test
  SRCS disk_crash_test.cc
  DEPS strata::kvstore_disk
  TIMEOUT 120
  LABELS kvstore_disk)
target_include_directories(kvstore_disk_crash_test PRIVATE ${PROJECT_SOURCE_DIR}/kvstore/src/disk)
target_compile_definitions(kvstore_disk_crash_test PRIVATE
  STRATA_DISK_CRASH_WRITER="$<TARGET_FILE:disk_crash_writer>")
add_dependencies(kvstore_disk_crash_test disk_crash_writer)
