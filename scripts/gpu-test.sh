#!/usr/bin/env bash
# Build softverbs and run its GPU tests (tests/gpu) on a machine with an
# NVIDIA GPU: the ones with the real driver (label gpu) and the ones with
# the fake driver (label gpu_fake); `ctest -L gpu` selects both.
#
#   scripts/gpu-test.sh            build into build-gpu, run the tests
#   scripts/gpu-test.sh --stage    copy rdma-core's headers into .gpu/include,
#                                  and libsodium's and zlib's headers and
#                                  libraries into .gpu/include and .gpu/lib
#                                  (run this where they are installed)
#
# softverbs is compiled against rdma-core's public headers
# (<infiniband/verbs.h>, <rdma/...>), which a GPU machine may lack: they are
# taken from .gpu/include when it has them (staged there beforehand by
# --stage, on a machine with libibverbs-dev and librdmacm-dev, and brought
# along: where .gpu/ is excluded from git, a copy of the working tree must
# name it explicitly), otherwise from the system (libibverbs-dev alone is
# enough). Only the target gpu_tests is built: the GPU tests, the fake
# driver and libibverbs.so.1, nothing that needs more of rdma-core.
#
# Needs gcc, cmake, make and the CUDA driver (libcuda.so.1); no CUDA
# toolkit, no rdma-core libraries or tools. Exits non-zero when a test fails,
# and also when the real-driver tests could not load the driver
# (SVT_CUDA_REQUIRED=1: no silent skip on the machine meant to run them).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
stage=$root/.gpu/include
build=${BUILD_DIR:-$root/build-gpu}

if [[ ${1:-} == --stage ]]; then
	for d in infiniband rdma; do
		if [[ ! -d /usr/include/$d ]]; then
			echo "gpu-test: /usr/include/$d missing: install libibverbs-dev and librdmacm-dev" >&2
			exit 1
		fi
	done
	mkdir -p "$stage"
	rm -rf "$stage/infiniband" "$stage/rdma"
	cp -r /usr/include/infiniband /usr/include/rdma "$stage/"
	echo "gpu-test: rdma-core headers staged in $stage"
	# libsodium and zlib, which libibverbs.so.1 links: a GPU machine may
	# have neither's development files (plain copies, no symbolic links)
	lib=$root/.gpu/lib
	mkdir -p "$lib/pkgconfig"
	cp -r /usr/include/sodium /usr/include/sodium.h /usr/include/zlib.h /usr/include/zconf.h "$stage/"
	for l in libsodium.so libsodium.so.23 libz.so libz.so.1; do
		cp -L "/usr/lib/$(gcc -print-multiarch)/$l" "$lib/$l"
	done
	printf '%s\n' 'prefix=${pcfiledir}/../..' 'libdir=${prefix}/lib' 'includedir=${prefix}/include' \
		'Name: libsodium' 'Description: staged for the GPU machine' 'Version: 1.0.18' \
		'Libs: -L${libdir} -lsodium' 'Cflags: -I${includedir}' >"$lib/pkgconfig/libsodium.pc"
	echo "gpu-test: libsodium and zlib staged in $lib"
	exit 0
fi

echo "== GPUs"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi -L || echo "gpu-test: nvidia-smi -L failed"
else
	echo "gpu-test: no nvidia-smi on this machine"
fi

cflags="${SVT_GPU_CFLAGS:-}"
if [[ -f $stage/infiniband/verbs.h ]]; then
	echo "== rdma-core headers: $stage"
	# -isystem: searched before /usr/include, and as system headers (no
	# -Werror on their warnings), as /usr/include's would be
	cflags="-isystem $stage $cflags"
elif [[ -f /usr/include/infiniband/verbs.h ]]; then
	echo "== rdma-core headers: /usr/include"
else
	echo "gpu-test: no <infiniband/verbs.h>: run 'scripts/gpu-test.sh --stage' on a machine" \
		"with libibverbs-dev and librdmacm-dev, and bring .gpu/include here" >&2
	exit 1
fi

if [[ -d $root/.gpu/lib ]]; then
	# what --stage brought: found by pkg-config and CMake, loaded at run time
	export PKG_CONFIG_PATH=$root/.gpu/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
	export CMAKE_PREFIX_PATH=$root/.gpu${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
	export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

echo "== configure ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_INCLUDE_PATH="$stage" -DCMAKE_C_FLAGS="$cflags"
echo "== build"
cmake --build "$build" -j"$(nproc)" --target gpu_tests

echo "== tests"
unset SOFTVERBS_CUDA_LIB # the real-driver tests use libcuda.so.1
export SVT_CUDA_REQUIRED=1
cd "$build"
ctest -L gpu --output-on-failure
