# The user commands. The build itself is CMake's (build/, build-asan/,
# build-tsan/, build-fuzz/).
JOBS ?= $(shell nproc)

.PHONY: all build test test-asan test-tsan fuzz demo bench deps clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j $(JOBS)

# After the tests, scripts/check-skips.sh lists the skipped ones and fails
# when one skipped although what it needs (a package deps.sh installs) is here.
test: build
	@cd build && rc=0; ctest --output-on-failure -j $(JOBS) --output-junit $(CURDIR)/build/junit.xml || rc=$$?; \
		sh ../scripts/check-skips.sh $(CURDIR)/build/junit.xml || rc=1; exit $$rc

test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOAR_SANITIZE=ON -DOAR_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && rc=0; ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) --output-junit $(CURDIR)/build-asan/junit.xml || rc=$$?; \
		sh ../scripts/check-skips.sh $(CURDIR)/build-asan/junit.xml || rc=1; exit $$rc

# ThreadSanitizer on the tests that run oar from several threads: the
# predictor served by 8 threads, clones packing new batch sizes at once
# (test_prepack_conv), the data loader's prefetch thread, and
# concurrent saves to one path (docs/internals/cpu.md). Only those tests are built. OMP_THREAD_LIMIT=1:
# libgomp is not instrumented, so TSan cannot see its barriers and would
# report the hand-offs between OpenMP threads as races (the ctest
# environment sets OMP_NUM_THREADS, which the limit caps).
TSAN_TESTS = test_predictor test_prepack_conv test_loader_more test_fit test_resume test_save_protocol
empty :=
space := $(empty) $(empty)
test-tsan: deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DOAR_TSAN=ON -DOAR_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TESTS)
	@cd build-tsan && OMP_THREAD_LIMIT=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
		ctest --output-on-failure -j $(JOBS) -R '^($(subst $(space),|,$(strip $(TSAN_TESTS))))$$'

# The libFuzzer harnesses (docs/fuzzing.md): a clang build in build-fuzz/,
# then FUZZ_SECONDS of each harness on its corpus (fuzz/corpus/).
FUZZ_SECONDS ?= 30
fuzz: deps
	@JOBS=$(JOBS) bash scripts/fuzz.sh all $(FUZZ_SECONDS)

demo: build
	@./build/fashion_mnist

bench: build
	@bash bench/run.sh

clean:
	rm -rf build build-asan build-tsan build-fuzz
