# Tessel — the two commands a person needs, and a few more.
#   make run    install what is missing, build (Release), start the service
#   make test   install what is missing, build with -Werror, run every test
#   make bench  the benchmark tables (tests/bench/README.md)
#   make bench-cluster  one SQLite node against 1, 2, 3 PostgreSQL nodes
#               (tests/bench/bench_cluster.py; needs postgresql-15)
# The variables the daemon reads (TESSEL_LISTEN, TESSEL_PORT,
# TESSEL_DATA_DIR, TESSEL_THREADS, ...) pass straight through `make run`.

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake
CUDA ?= AUTO
BUILD ?= build
TEST_BUILD ?= build-test
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
# Where each suite of `make test` leaves its counts (CTest's JUnit files,
# the browser tests' TAP, the Docker test's verdict) for tests/summary.py.
TEST_RESULTS ?= $(CURDIR)/$(TEST_BUILD)/results

export TESSEL_LISTEN ?= 127.0.0.1
export TESSEL_PORT ?= 8080
export TESSEL_DATA_DIR ?= $(CURDIR)/data

.PHONY: all deps deps-test deps-bench build run test test-main test-asan test-tsan test-fuzz \
        test-browser test-docker bench bench-cluster clean format

all: build

deps:
	@sh deps/install.sh build runtime

deps-test:
	@sh deps/install.sh build runtime test

# The peers of tests/bench/bench_geoquery.py (PostGIS, scikit-learn).
deps-bench:
	@sh deps/install.sh bench

build: deps
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTESSEL_CUDA=$(CUDA)
	$(CMAKE) --build $(BUILD) -j $(JOBS) --target tesseld

run: build
	TESSEL_WEB_DIR=$(CURDIR)/web ./$(BUILD)/tesseld

# The whole suite: the main build (-Werror) under CTest, the sanitizer build
# of the unit and integration tests, the fuzz targets, the browser tests and
# the Docker test (which reports itself skipped when no engine can start).
# Every suite runs even after one failed; tests/summary.py then prints each
# suite's counts, every skip with its reason and every failure, and last
# "N passed, N failed, N skipped" alone on its line (CI reads it); the
# exit status is 1 when anything failed. A suite that stopped before it
# left a result (a build error) counts as one failure.
TEST_SUITES = main asan tsan fuzz browser docker
test: deps-test
	@rm -rf $(TEST_RESULTS) && mkdir -p $(TEST_RESULTS)
	@for s in $(TEST_SUITES); do \
	  $(MAKE) test-$$s TEST_RESULTS=$(TEST_RESULTS); rc=$$?; \
	  if [ -z "$$(ls $(TEST_RESULTS)/$$s.xml $(TEST_RESULTS)/$$s-*.tap \
	        $(TEST_RESULTS)/$$s.verdict 2>/dev/null)" ]; then \
	    mkdir -p $(TEST_RESULTS); \
	    echo "make test-$$s exited $$rc without a result" > $(TEST_RESULTS)/$$s.missing; \
	  fi; \
	done; \
	/usr/bin/python3 tests/summary.py $(TEST_RESULTS)

test-main:
	$(CMAKE) -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_WERROR=ON -DTESSEL_CUDA=$(CUDA) -DCMAKE_CUDA_ARCHITECTURES=90
	$(CMAKE) --build $(TEST_BUILD) -j $(JOBS)
	mkdir -p $(TEST_RESULTS)
	cd $(TEST_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900 \
	  --output-junit $(TEST_RESULTS)/main.xml

test-asan:
	mkdir -p $(TEST_RESULTS)
	$(CMAKE) -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
	  -DTESSEL_WERROR=ON -DTESSEL_SANITIZE=ON -DTESSEL_CUDA=OFF
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L 'unit|integration|hostile' --timeout 900 \
	  --output-junit $(TEST_RESULTS)/asan.xml

# ThreadSanitizer over the concurrent parts: the pool, inputs built on it
# (arrayval), the uploaded arrays kept mapped between jobs (lifecycle), a
# batch's items checked on several threads (jobs_batch) and the scheduler
# (two cluster nodes in one process included: test_sched_nodes).
test-tsan:
	mkdir -p $(TEST_RESULTS)
	$(CMAKE) -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
	  -DTESSEL_WERROR=ON -DTESSEL_TSAN=ON -DTESSEL_CUDA=OFF
	$(CMAKE) --build $(TSAN_BUILD) -j $(JOBS) --target unit_test_pool unit_test_arrayval unit_test_sched unit_test_sched_gpu unit_test_sched_mem unit_test_sched_parts unit_test_sched_cluster unit_test_sched_nodes unit_test_sched_gang unit_test_sched_ended unit_test_wbehind unit_test_pdigest unit_test_spare unit_test_split_join unit_test_mgpu unit_test_sched_mgpu unit_test_reduce_lanes unit_test_map_lanes unit_test_store_fold unit_test_store_hold unit_test_store_threads unit_test_jobs_rids unit_test_jobs_batch unit_test_lifecycle
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure -R 'pool|arrayval|sched|wbehind|pdigest|unit/test_spare|split_join|unit/test_mgpu|unit/test_reduce_lanes|unit/test_map_lanes|unit/test_store_fold|unit/test_store_hold|unit/test_store_threads|jobs_rids|unit/test_jobs_batch|unit/test_lifecycle' --timeout 600 \
	  --output-junit $(TEST_RESULTS)/tsan.xml

test-fuzz:
	mkdir -p $(TEST_RESULTS)
	CC=clang $(CMAKE) -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug \
	  -DTESSEL_FUZZ=ON -DTESSEL_CUDA=OFF
	$(CMAKE) --build $(FUZZ_BUILD) -j $(JOBS)
	cd $(FUZZ_BUILD) && ctest --output-on-failure -L fuzz --output-junit $(TEST_RESULTS)/fuzz.xml

test-browser: build
	mkdir -p $(TEST_RESULTS)
	TESSEL_TEST_RESULTS=$(TEST_RESULTS) sh tests/browser/run.sh $(BUILD)/tesseld

test-docker:
	mkdir -p $(TEST_RESULTS)
	TESSEL_TEST_RESULTS=$(TEST_RESULTS) sh tests/docker/run.sh

bench: build
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTESSEL_CUDA=$(CUDA)
	$(CMAKE) --build $(BUILD) -j $(JOBS)
	sh tests/bench/run.sh $(BUILD)

# Tiny ?wait jobs per second on one SQLite node and 1-3 PostgreSQL nodes,
# and the store's claim rate alone; the table goes to tests/bench/results/.
bench-cluster:
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTESSEL_CUDA=$(CUDA)
	$(CMAKE) --build $(BUILD) -j $(JOBS) --target tesseld bench_claim
	/usr/bin/python3 tests/bench/bench_cluster.py $(BUILD)/tesseld \
	  --out tests/bench/results/cluster-$$(nproc)core-$$(date +%Y-%m-%d).md

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
