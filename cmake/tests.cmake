# tests.cmake: registers every test by file name, one process per test with a timeout.
#   tests/**/test_*.c   a C test program linked with libcohort (private headers visible)
#   tests/**/test_*.sh  a shell test, run with bash
#   tests/**/test_*.py  a Python test, run with the system interpreter (Debian's python3-torch)
#   tests/fuzz/fuzz_*.c a libFuzzer target; its corpus tests/fuzz/corpus/<name>/ replays as a test
# Script tests get COHORT (the CLI), COHORT_SOURCE_DIR, COHORT_BUILD_DIR and COHORT_DATA_DIR in
# their environment; exit code 77 marks a test skipped (never counted as passed).
# Skips: a test never returns early and passes. When a part of it cannot run here (a cpu
# feature, data or a program missing) it prints "SKIP <part>: <reason>" and, when nothing failed,
# exits 77 (SKIP_RETURN_CODE below), so ctest reports the whole test as skipped and
# scripts/test.sh does not count it as passed; a failure anywhere still exits 1. C tests do it
# with SKIP_CASE() of tests/check.h, scripts with a skip() of their own (comm: comm_lib.sh).
set(COHORT_TEST_TIMEOUT 300 CACHE STRING "seconds a test may run")
set(COHORT_PYTHON /usr/bin/python3 CACHE FILEPATH "interpreter with python3-torch and python3-numpy")

# COHORT_PEAK_GFLOPS: every `cohort train` of the tests takes this peak for MFU instead of
# measuring one at start (a GEMM for 0.4 s per process, which was nearly a third of the suites'
# cpu time); test_train_peak.sh unsets it and tests the measured peak.
# GOMP_SPINCOUNT: ctest -j runs two tests at once on the same cpus, and two processes that each
# run an OpenMP team as wide as the machine wait on each other's cores: by default a thread
# spins 300000 turns at every barrier for a partner that is not running, and two 2-thread
# trainings of the tests' 4-block model took 263-290 s together against 0.2-0.3 s alone
# (1000 turns: 2.3 s together). Tests timed out so. cohort's own commands now bound it when they
# see other work on their cpus at start, but that is one reading, and the C test programs run
# OpenMP without that restart: the suites give every test the one value (docs/train.md "Two
# jobs on the same CPUs").
set(COHORT_TEST_ENV
    "COHORT=$<TARGET_FILE:cohort>"
    "COHORT_PEAK_GFLOPS=1000"
    "GOMP_SPINCOUNT=1000"
    "COHORT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    "COHORT_BUILD_DIR=${PROJECT_BINARY_DIR}"
    "COHORT_DATA_DIR=${COHORT_DATA_DIR}"
    "COHORT_GPT2_DIR=${COHORT_GPT2_DIR}"
    "COHORT_PYTHON=${COHORT_PYTHON}")

function(cohort_test_props name)
  set_tests_properties(${name} PROPERTIES TIMEOUT ${COHORT_TEST_TIMEOUT} SKIP_RETURN_CODE 77
                       ENVIRONMENT "${COHORT_TEST_ENV}")
endfunction()

file(GLOB_RECURSE COHORT_C_TESTS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/test_*.c")
foreach(src ${COHORT_C_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}/src" "${PROJECT_SOURCE_DIR}/tests")
  target_link_libraries(${name} PRIVATE cohort_static)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  cohort_test_props(${name})
endforeach()

file(GLOB_RECURSE COHORT_SH_TESTS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/test_*.sh")
foreach(src ${COHORT_SH_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${src} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  cohort_test_props(${name})
endforeach()

file(GLOB_RECURSE COHORT_PY_TESTS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/test_*.py")
foreach(src ${COHORT_PY_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND ${COHORT_PYTHON} ${src} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  cohort_test_props(${name})
endforeach()

file(GLOB COHORT_FUZZERS CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz_*.c")
foreach(src ${COHORT_FUZZERS})
  get_filename_component(stem ${src} NAME_WE)
  string(REPLACE "fuzz_" "" name ${stem})
  # The replay program runs every corpus file through the target: the corpus is a test.
  add_executable(replay_${name} ${src} "${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.c")
  target_include_directories(replay_${name} PRIVATE "${PROJECT_SOURCE_DIR}/src")
  target_link_libraries(replay_${name} PRIVATE cohort_static)
  add_test(NAME fuzz_replay_${name}
           COMMAND replay_${name} "${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name}")
  cohort_test_props(fuzz_replay_${name})
  if(COHORT_FUZZ)
    add_executable(fuzz_${name} ${src})
    target_include_directories(fuzz_${name} PRIVATE "${PROJECT_SOURCE_DIR}/src")
    target_link_libraries(fuzz_${name} PRIVATE cohort_static)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  endif()
endforeach()

# Open MPI's jobs are the slowest tests under a sanitizer on a loaded 2-core machine (113 s and
# 67 s in a quiet CI run, close to 300 s beside the 8-rank trainer tests): room to finish.
foreach(name test_comm_mpi test_comm_mpi_hier)
  if(TEST ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT 600)
  endif()
endforeach()
