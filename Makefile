# Thin wrapper over CMake: the user's contract is `make`, `make test`, `make demo`.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# make install [PREFIX=/usr/local] [DESTDIR=staging root]
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all build test test-full demo deps bench bench-shm bench-ucx clean install uninstall deb

all: build

build:
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# `make test`: every test but those labelled "full", the repeats of a point
# of the test matrix (the same test over another transport, size, GID index,
# between namespaces...), of which one representative runs; `make
# test-full`: everything, as CI does (.ci/run).  `ctest` alone runs
# everything too.  Both end with CTest's summary and the list of what was
# skipped, with why and what to install (scripts/test-summary.sh).
# CTEST_FLAGS are added to ctest's arguments (with `make test`, a second -LE
# excludes only tests that match both: use test-full for your own choice).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE full $(CTEST_FLAGS); rc=$$?; \
		cd $(CURDIR) && scripts/test-summary.sh $(BUILD); exit $$rc

test-full: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS); rc=$$?; \
		cd $(CURDIR) && scripts/test-summary.sh $(BUILD); exit $$rc

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

# The tool in $(PREFIX)/bin, the libraries in the private $(PREFIX)/lib/softverbs
# (they do not replace the system's rdma-core), man pages, pkg-config file.
# The prefix is configured into the build (the pkg-config file names it).
# The list of installed files (DESTDIR included) is kept for `make uninstall`.
install:
	@cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD)
	@sed 's|^|$(DESTDIR)|' $(BUILD)/install_manifest.txt > $(BUILD)/make-install-manifest.txt

uninstall:
	@test -f $(BUILD)/make-install-manifest.txt || \
		{ echo "uninstall: no $(BUILD)/make-install-manifest.txt (nothing installed from this build)"; exit 1; }
	xargs -d '\n' rm -f -- < $(BUILD)/make-install-manifest.txt
	@sed -n 's|/libibverbs.so.1$$||p' $(BUILD)/make-install-manifest.txt | xargs -r -d '\n' rmdir --ignore-fail-on-non-empty --
	@rm -f $(BUILD)/make-install-manifest.txt

# The Debian package (dpkg-buildpackage + debhelper, debian/), built from a
# staged copy of the source; the .deb lands in $(BUILD)/deb.
deb:
	@JOBS=$(JOBS) scripts/build-deb.sh $(BUILD)/deb

clean:
	rm -rf $(BUILD)
