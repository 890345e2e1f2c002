# Test registration. Every file tests/unit/test_*.c is one executable and one
# CTest test; tests/integration/test_*.c likewise, with libcurl and the path of
# the daemon; tests/gpu/test_*.c exit 77 (CTest's "skipped") when no GPU is
# present (and fail where nvidia-smi lists one but the probe fails); a test
# that cannot run what this machine lacks exits 77 too (SKIP_TEST in
# tests/check.h), never 0; tests/fuzz/fuzz_*.c are libFuzzer targets (TESSEL_FUZZ=ON, clang);
# tests/bench/bench_*.c are benchmark programs, built but never run as tests.
find_package(CURL REQUIRED)
pkg_check_modules(PROJ IMPORTED_TARGET proj)

set(TESSEL_TEST_FLAGS ${TESSEL_WARN} ${TESSEL_FP_FLAGS} ${TESSEL_SAN_FLAGS})

# Job kinds that exist only in tests (tests/kinds/: a test adds one to the
# kind table with kinds_register); never linked into the daemon.
file(GLOB TESSEL_TEST_KINDS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/kinds/*.c)
add_library(tessel_test_kinds STATIC ${TESSEL_TEST_KINDS})
target_compile_options(tessel_test_kinds PRIVATE ${TESSEL_TEST_FLAGS})
target_include_directories(tessel_test_kinds PUBLIC ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(tessel_test_kinds PUBLIC tessel_core)

function(tessel_test_exe name src)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE ${TESSEL_TEST_FLAGS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE tessel_test_kinds tessel_core CURL::libcurl)
  if(PROJ_FOUND)
    target_link_libraries(${name} PRIVATE PkgConfig::PROJ)
    target_compile_definitions(${name} PRIVATE TESSEL_HAVE_PROJ=1)
  endif()
endfunction()

if(NOT TESSEL_FUZZ)
  file(GLOB UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/test_*.c)
  foreach(src ${UNIT_TESTS})
    get_filename_component(n ${src} NAME_WE)
    tessel_test_exe(unit_${n} ${src})
    # test_store_cluster and test_store_notify need a PostgreSQL server:
    # they run as store_cluster_pg and store_notify_pg below, never as
    # skipped unit tests.
    if(NOT n STREQUAL "test_store_cluster" AND NOT n STREQUAL "test_store_notify")
      add_test(NAME unit/${n} COMMAND unit_${n})
      set_tests_properties(unit/${n} PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
    endif()
  endforeach()

  # The store's unit tests again on a throwaway PostgreSQL server
  # (tests/cluster/with_pg.sh starts it and sets TESSEL_TEST_PG).
  add_test(NAME store_pg
    COMMAND ${CMAKE_SOURCE_DIR}/tests/cluster/with_pg.sh $<TARGET_FILE:unit_test_store>)
  set_tests_properties(store_pg PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
  # Group commit and store_insert_jobs on PostgreSQL (the same file as
  # unit/test_store_batch, TESSEL_TEST_PG set).
  add_test(NAME store_batch_pg
    COMMAND ${CMAKE_SOURCE_DIR}/tests/cluster/with_pg.sh $<TARGET_FILE:unit_test_store_batch>)
  set_tests_properties(store_batch_pg PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
  # The cluster section of the store (db/pg/pg_cluster.c): two stores on one
  # throwaway server as two nodes; it restarts the server once.
  add_test(NAME store_cluster_pg
    COMMAND ${CMAKE_SOURCE_DIR}/tests/cluster/with_pg.sh $<TARGET_FILE:unit_test_store_cluster>)
  set_tests_properties(store_cluster_pg PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
  # The events after their commit (db/pg/pg_conn.c, pg__note).
  add_test(NAME store_notify_pg
    COMMAND ${CMAKE_SOURCE_DIR}/tests/cluster/with_pg.sh $<TARGET_FILE:unit_test_store_notify>)
  set_tests_properties(store_notify_pg PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77)

  file(GLOB INTEG_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/integration/test_*.c)
  foreach(src ${INTEG_TESTS})
    get_filename_component(n ${src} NAME_WE)
    tessel_test_exe(integ_${n} ${src})
    add_test(NAME integration/${n} COMMAND integ_${n} $<TARGET_FILE:tesseld>)
    set_tests_properties(integration/${n} PROPERTIES LABELS integration TIMEOUT 900
      SKIP_RETURN_CODE 77
      ENVIRONMENT "TESSEL_WEB_DIR=${CMAKE_SOURCE_DIR}/web;TESSEL_TEST_TLS_DIR=${CMAKE_SOURCE_DIR}/tests/integration/tls")
  endforeach()

  file(GLOB GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/test_*.c)
  foreach(src ${GPU_TESTS})
    get_filename_component(n ${src} NAME_WE)
    tessel_test_exe(gpu_${n} ${src})
    add_test(NAME gpu/${n} COMMAND gpu_${n})
    set_tests_properties(gpu/${n} PROPERTIES LABELS gpu TIMEOUT 900 SKIP_RETURN_CODE 77)
  endforeach()

  # The hostile-input suite: Python (standard library) against the real
  # daemon; `make test-asan` runs it against the ASan+UBSan daemon too.
  find_program(TESSEL_PYTHON3 python3)
  if(TESSEL_PYTHON3)
    add_test(NAME hostile/suite
      COMMAND ${TESSEL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/hostile/run.py $<TARGET_FILE:tesseld>)
    set_tests_properties(hostile/suite PROPERTIES LABELS hostile TIMEOUT 900
      ENVIRONMENT "TESSEL_WEB_DIR=${CMAKE_SOURCE_DIR}/web")
    # api/openapi.json against the live answers of every route (success and
    # error); skipped (77) without Debian's python3-jsonschema.
    add_test(NAME integration/contract
      COMMAND ${TESSEL_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/contract/run.py $<TARGET_FILE:tesseld>)
    set_tests_properties(integration/contract PROPERTIES LABELS integration
      TIMEOUT 300 SKIP_RETURN_CODE 77)
  endif()

  # The Python client (clients/python) against the real daemon; skipped
  # (77) with a message when Debian's python3 lacks NumPy or pytest.
  add_test(NAME python/client
    COMMAND sh ${CMAKE_SOURCE_DIR}/clients/python/tests/run.sh $<TARGET_FILE:tesseld>)
  set_tests_properties(python/client PROPERTIES LABELS integration TIMEOUT 600
    SKIP_RETURN_CODE 77)

  # Two nodes on one PostgreSQL store and data directory: the cross-node
  # paths once each (tests/cluster/test_two_nodes.sh); skipped (77) without
  # a PostgreSQL server (any major) or a tesseld built with libpq.
  add_test(NAME cluster_smoke
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/cluster/test_two_nodes.sh $<TARGET_FILE:tesseld>)
  set_tests_properties(cluster_smoke PROPERTIES LABELS integration TIMEOUT 300
    SKIP_RETURN_CODE 77)
  add_test(NAME cluster_split
    COMMAND sh ${CMAKE_SOURCE_DIR}/tests/cluster/test_split_nodes.sh $<TARGET_FILE:tesseld>)
  set_tests_properties(cluster_split PROPERTIES LABELS integration TIMEOUT 300
    SKIP_RETURN_CODE 77)

  # Issue 14's judgement: its own PostgreSQL (pgserver.sh) and three
  # nodes: bad configuration, 2,000 jobs with a kill -9, idempotency, cancel
  # and ?wait across nodes, cuda without a GPU node, a split job against
  # SQLite, the store stopped under load, expiry once
  # (tests/cluster/test_cluster.py, Debian's python3 and its standard
  # library only; about 1 minute on the 2-core VM). Skipped (77, with the
  # reason) only without a PostgreSQL server.
  add_test(NAME cluster
    COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/cluster/test_cluster.py $<TARGET_FILE:tesseld>)
  set_tests_properties(cluster PROPERTIES LABELS integration TIMEOUT 900
    SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  # docker/compose.yaml's cluster profile, read as Compose reads it.
  add_test(NAME cluster_compose
    COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/cluster/check_compose.py
      ${CMAKE_SOURCE_DIR}/docker/compose.yaml)
  set_tests_properties(cluster_compose PROPERTIES LABELS integration TIMEOUT 60)

  file(GLOB BENCHES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/bench/bench_*.c)
  foreach(src ${BENCHES})
    get_filename_component(n ${src} NAME_WE)
    tessel_test_exe(${n} ${src})
  endforeach()
  # A standalone CUDA probe (no Tessel code): how fast a result can go from
  # device memory into a result file, each way (tests/bench/README.md).
  if(TESSEL_HAVE_CUDA)
    add_executable(bench_d2h_store ${CMAKE_SOURCE_DIR}/tests/bench/bench_d2h_store.cu)
    target_link_libraries(bench_d2h_store PRIVATE CUDA::cudart pthread)
  endif()
else()
  set(TESSEL_FUZZ_SECONDS 5 CACHE STRING "Seconds each fuzz target runs under CTest")
  file(GLOB FUZZERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
  foreach(src ${FUZZERS})
    get_filename_component(n ${src} NAME_WE)
    add_executable(${n} ${src})
    target_include_directories(${n} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
    target_compile_options(${n} PRIVATE -fsanitize=fuzzer,address,undefined -g)
    target_link_options(${n} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${n} PRIVATE tessel_core)
    # New inputs go to the build tree; the committed seeds are only read.
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/corpus/${n} ${CMAKE_SOURCE_DIR}/tests/fuzz/seeds/${n})
    add_test(NAME fuzz/${n}
      COMMAND ${n} -max_total_time=${TESSEL_FUZZ_SECONDS} -rss_limit_mb=2048 -timeout=10
              ${CMAKE_BINARY_DIR}/corpus/${n} ${CMAKE_SOURCE_DIR}/tests/fuzz/seeds/${n})
    set_tests_properties(fuzz/${n} PROPERTIES LABELS fuzz TIMEOUT 120)
  endforeach()
endif()

# The layout's rules (include directions, a README per folder, folder
# sizes), read from the source tree.
find_program(TESSEL_PYTHON3_LAYOUT python3)
if(TESSEL_PYTHON3_LAYOUT AND NOT TESSEL_FUZZ)
  add_test(NAME layout/check_layout
    COMMAND ${TESSEL_PYTHON3_LAYOUT} ${CMAKE_SOURCE_DIR}/tests/layout/check_layout.py ${CMAKE_SOURCE_DIR})
  set_tests_properties(layout/check_layout PROPERTIES LABELS unit TIMEOUT 60)
  # Rules 10 (file circles) and 11 (named paths) on made-up trees.
  add_test(NAME layout/rules
    COMMAND ${TESSEL_PYTHON3_LAYOUT} ${CMAKE_SOURCE_DIR}/tests/layout/test_rules.py)
  set_tests_properties(layout/rules PROPERTIES LABELS unit TIMEOUT 60)
  # The closing lines of make test (tests/summary.py) on made-up results.
  add_test(NAME unit/summary
    COMMAND ${TESSEL_PYTHON3_LAYOUT} ${CMAKE_SOURCE_DIR}/tests/test_summary.py)
  set_tests_properties(unit/summary PROPERTIES LABELS unit TIMEOUT 60)
endif()

