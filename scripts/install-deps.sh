#!/usr/bin/env bash
# Install the Debian/Ubuntu packages softverbs needs to build, test and demo.
#
#   scripts/install-deps.sh [--all] [EXTRA_PACKAGE...]
#
# --all adds every package some test runs over softverbs or uses to check it
# (the tests skip, naming the package, where one is missing): the sanitizer
# compiler, UCX, Open MPI, MPICH, libfabric, DAPL, scapy, tcpdump, tshark,
# ethtool (the tests' veths cut UDP runs into packets as a NIC does), and
# qemu with debootstrap for the Soft-RoCE guest.  CI (.ci/run) installs
# these.
#
# Build: cmake, gcc, make, pkg-config and rdma-core's headers (libibverbs-dev,
# librdmacm-dev: softverbs is built against them, they are the ABI contract);
# libsodium-dev for the peers' handshake (HMAC-SHA-256); zlib1g-dev and
# libisal-dev (ISA-L, optional: zlib's is used without it) for RoCEv2's CRC-32.
# Clients run over softverbs in tests and benchmarks: ibverbs-utils,
# rdmacm-utils, perftest, qperf, dapl2-utils (uDAPL's dtest); iproute2 for
# network namespaces; iperf3 as the TCP reference. Extra package names given
# as arguments (e.g. clang for sanitizer builds) are installed too.
#
# Does nothing, and needs no privileges, when everything is already installed.
# Otherwise uses apt-get directly as root, or through sudo.
set -euo pipefail

test_packages=(
	clang ucx-utils libucx-dev openmpi-bin libopenmpi-dev mpich libmpich-dev
	libfabric-bin dapl2-utils python3-scapy tcpdump tshark ethtool
	qemu-system-x86 debootstrap e2fsprogs
)
extra=()
for a in "$@"; do
	if [ "$a" = --all ]; then
		extra+=("${test_packages[@]}")
	else
		extra+=("$a")
	fi
done

packages=(
	cmake gcc make pkg-config
	libibverbs-dev librdmacm-dev libsodium-dev zlib1g-dev libisal-dev
	ibverbs-utils rdmacm-utils perftest qperf dapl2-utils
	iproute2 iperf3
	${extra[@]+"${extra[@]}"}
)

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "install-deps: not a Debian/Ubuntu system (no dpkg-query)." >&2
	echo "install-deps: install the equivalents of: ${packages[*]}" >&2
	exit 1
fi

missing=()
for pkg in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "installed" ]; then
		missing+=("$pkg")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all required packages are installed."
	exit 0
fi

echo "install-deps: installing: ${missing[*]}"

if [ "$(id -u)" -eq 0 ]; then
	as_root=()
elif command -v sudo >/dev/null 2>&1; then
	as_root=(sudo)
else
	echo "install-deps: need root to install packages, and sudo is not available." >&2
	echo "install-deps: as root, run: apt-get install ${missing[*]}" >&2
	exit 1
fi

# sudo resets the environment, so pass the non-interactive frontend through env.
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q)
"${apt[@]}" update
"${apt[@]}" install --no-install-recommends "${missing[@]}"
