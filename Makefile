# Thin wrapper over CMake: the user's contract is `make`, `make test`, `make demo`.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo deps bench clean

all: build

build:
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

deps:
	@scripts/install-deps.sh

demo: deps build
	@$(BUILD)/bin/softverbs-demo-run

# softverbs vs TCP (loopback and veth) with perftest, qperf, iperf3; not part
# of `make test`.  It builds (and installs its packages) itself.  QUICK=1 for
# a short smoke run.  See docs/PERFORMANCE.md.
bench:
	@bench/run-tcp.sh

clean:
	rm -rf $(BUILD)
