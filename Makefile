# Thin wrapper over CMake: the user's contract is `make`, `make test`, `make demo`.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo deps bench bench-shm bench-ucx clean

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

# softverbs between two processes of this host (default transport and
# SOFTVERBS_TRANSPORT=tcp) vs UCX over shared memory (ucx_perftest) and
# memcpy; not part of `make test`.  QUICK=1 for a short smoke run.  See
# docs/PERFORMANCE.md, "Intra-host".
bench-shm:
	@bench/run-shm.sh

# UCX over softverbs (rc_verbs) next to UCX's own shm and tcp transports,
# two processes of this host; not part of `make test`.  QUICK=1 for a short
# run.  See docs/PERFORMANCE.md, "UCX over softverbs".
bench-ucx: build
	@bench/run-ucx.sh

clean:
	rm -rf $(BUILD)
