# The user commands. The build itself is CMake's (build/, build-asan/,
# build-fuzz/).
JOBS ?= $(shell nproc)

.PHONY: all build test test-asan fuzz demo bench deps clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j $(JOBS)

test: build
	@cd build && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOAR_SANITIZE=ON -DOAR_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

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
	rm -rf build build-asan build-fuzz
