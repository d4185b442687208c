# Thin wrapper over CMake: the user's contract is `make`, `make test`, `make demo`.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo deps clean

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

clean:
	rm -rf $(BUILD)
