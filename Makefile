# Thin wrapper over CMake. `make demo` and `make test` install what they
# need (scripts/deps.sh), configure, build and run.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
# deps.sh installs libtorch and pybind11, so the PyTorch backend and its
# tests must build: a configure that cannot find them fails instead of
# dropping them.
REQUIRE_FLAGS ?= -DBRAID_REQUIRE_TORCH=ON

.PHONY: all deps build test demo bench install clean fuzz

all: build

deps:
	@scripts/deps.sh build

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) $(REQUIRE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

demo: build
	scripts/demo.sh $(BUILD)

bench: build
	@scripts/deps.sh bench
	bench/run_all.sh $(BUILD)

# The libFuzzer targets (fuzz/), in a clang ASan+UBSan build tree of their
# own ($(FUZZ_BUILD)); scripts/fuzz.sh runs them.
FUZZ_BUILD ?= build-fuzz
fuzz:
	@scripts/deps.sh fuzz
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DBRAID_SANITIZE=address,undefined -DBRAID_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD)
