#!/usr/bin/env bash
# bench/gpu-perftest-build.sh: build perftest (ib_write_bw, ib_read_bw,
# ib_send_bw, ... with --use_cuda) against softverbs' own libibverbs.so.1 and
# librdmacm.so.1, on a GPU machine that has neither rdma-core nor perftest.
#
#   bench/gpu-perftest-build.sh
#
# Settings (environment), defaults relative to the repository root:
#   PERFTEST_SRC  perftest release tree with ./configure already generated
#                 (autogen.sh run elsewhere: no autotools needed here)  [.gpu/perftest]
#   SV_BUILD      softverbs build dir (its lib/ has libibverbs.so.1)     [build-gpu]
#   SV_INCLUDE    rdma-core's public headers, plus infiniband/umad*.h    [.gpu/include]
#   SV_EXTRA_LIB  where libibumad.so.3 is (ib_send_* link it)            [.gpu/lib]
#   CUDA_HOME     CUDA toolkit; only include/cuda.h is used              [/usr/local/cuda]
#   PERFTEST_OUT  scratch build dir (recreated)                          [build-gpu-perftest]
#   PROGS         programs to build   [ib_write_bw ib_read_bw ib_send_bw + the _lat ones]
#   JOBS          make -j                                                [nproc]
#
# perftest loads the CUDA driver itself, with dlopen("libcuda.so") (no .1):
# where the driver has no such link, one to libcuda.so.1 is made in
# $PERFTEST_OUT/lib, which is on the programs' RUNPATH. --enable-cudart (the
# --gpu_touch kernels) is left off. Relaxed ordering (HAVE_RO, libpci:
# pciutils' headers and library are not needed then) is compiled out, and
# so are the mlx5/efa/hns direct-verbs and libnuma extras: none applies to
# softverbs, and the result is the same wherever this runs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$(realpath "${PERFTEST_SRC:-$root/.gpu/perftest}")
sv=$(realpath "${SV_BUILD:-$root/build-gpu}")
inc=$(realpath "${SV_INCLUDE:-$root/.gpu/include}")
extra=$(realpath "${SV_EXTRA_LIB:-$root/.gpu/lib}")
cuda=${CUDA_HOME:-/usr/local/cuda}
out=$(realpath -m "${PERFTEST_OUT:-$root/build-gpu-perftest}")
progs=${PROGS:-ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat}

die() { echo "gpu-perftest-build: $*" >&2; exit 1; }
[[ -x $src/configure ]] || die "$src/configure missing (run perftest's autogen.sh where autotools are)"
for f in "$sv/lib/libibverbs.so.1" "$sv/lib/librdmacm.so.1" "$inc/infiniband/verbs.h" \
	"$inc/infiniband/umad.h" "$extra/libibumad.so.3" "$cuda/include/cuda.h"; do
	[[ -e $f ]] || die "$f missing"
done

rm -rf "$out"
mkdir -p "$out/lib"
cp -r "$src" "$out/perftest"
# the headers less the vendors' direct verbs (mlx5dv.h, efadv.h, ...):
# with mlx5dv.h but no libmlx5, perftest compiles DEVX code it cannot build
cp -r "$inc" "$out/include"
rm -f "$out/include/infiniband/"*dv.h
# one mtime for the whole copy: make must not try to rerun aclocal/automake
find "$out/perftest" -exec touch -h -d @1700000000 {} +
ln -s "$sv/lib/libibverbs.so.1" "$out/lib/libibverbs.so"
ln -s "$sv/lib/librdmacm.so.1" "$out/lib/librdmacm.so"
ln -s "$extra/libibumad.so.3" "$out/lib/libibumad.so"
ar rc "$out/lib/libpci.a" # empty: satisfies configure's -lpci (see below), adds nothing
ldcache=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
if ! grep -q 'libcuda\.so (' <<<"$ldcache"; then
	drv=$(awk '/libcuda\.so\.1 \(/ && $NF !~ /stubs/ && !d {d = $NF} END {print d}' <<<"$ldcache")
	if [[ -n $drv ]]; then
		ln -s "$drv" "$out/lib/libcuda.so"
	else
		echo "gpu-perftest-build: WARNING: no libcuda.so.1 (CUDA driver) found: --use_cuda will fail" >&2
	fi
fi

cd "$out/perftest"
# ac_cv_*: pci/pci.h and libpci are taken as present so that configure goes
# on (-lpci is the empty archive above); HAVE_RO, the one user of libpci,
# is then removed from config.h.
./configure CPPFLAGS="-isystem $out/include" \
	LDFLAGS="-L$out/lib -Wl,-rpath,$sv/lib:$extra:$out/lib" \
	CUDA_H_PATH="$cuda/include/cuda.h" --disable-cudart \
	ac_cv_header_pci_pci_h=yes ac_cv_lib_pci_pci_init=yes \
	ac_cv_lib_mlx5_mlx5dv_create_qp=no ac_cv_lib_efa_efadv_create_qp_ex=no \
	ac_cv_lib_efa_efadv_create_driver_qp=no ac_cv_lib_hns_hnsdv_query_device=no \
	ac_cv_lib_numa_numa_available=no >configure.out ||
	{ tail -20 configure.out; die "configure failed: $out/perftest/config.log"; }
grep -q '^#define HAVE_CUDA 1' config.h || die "configure did not enable CUDA"
sed -i '/^#define HAVE_RO 1$/d' config.h
# and where the system has mlx5dv.h/efadv.h (rdma-core's -dev packages), the
# features configure takes from those headers alone, without their library
sed -i -E '/^#define HAVE_(MLX5_DEVX|DCS|MLX5DV_BF_FLAG|OOO_RECV_WRS|DATA_DIRECT|AES_XTS|SRD_[A-Z_]+) 1$/d' config.h
# shellcheck disable=SC2086 # PROGS is a list
make -j"${JOBS:-$(nproc)}" $progs >make.out 2>&1 || { tail -30 make.out; die "make failed: $out/perftest/make.out"; }

echo "== perftest $(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' config.h), CUDA $(sed -n 's/^#define CUDA_VER //p' config.h) ($cuda)"
ldd "$out/perftest/${progs%% *}" | grep -E 'ibverbs|rdmacm|umad' || true
echo "== binaries in $out/perftest:"
for p in $progs; do echo "  $out/perftest/$p"; done
echo "e.g. SOFTVERBS_LOOPBACK=1 $sv/bin/softverbs run -- $out/perftest/ib_write_bw --use_cuda=0 -d sv_lo"
