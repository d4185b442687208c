#!/usr/bin/env bash
# Build the Debian package with Debian's own tooling (dpkg-buildpackage and
# debhelper, debian/ in this tree).
#
#   scripts/build-deb.sh OUTDIR
#
# The source is staged in OUTDIR/softverbs-VERSION (the files git tracks or
# would track, so uncommitted edits are packaged too; everything but build
# trees outside git) and built there, binary-only and unsigned; the .deb
# lands in OUTDIR.  Nothing is written outside OUTDIR.  Missing build
# dependencies (debhelper, dpkg-dev and those in debian/control) are
# installed with scripts/install-deps.sh.
set -euo pipefail

out=${1:?usage: $0 OUTDIR}
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"

scripts/install-deps.sh debhelper dpkg-dev >/dev/null

version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
cmake_version=$(sed -n 's/^project(softverbs VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
if [ "$upstream" != "$cmake_version" ]; then
	echo "build-deb: debian/changelog says $upstream, CMakeLists.txt $cmake_version" >&2
	exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$out/softverbs-$upstream
rm -rf "$stage"
mkdir -p "$stage"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -C "$src" ls-files -z --cached --others --exclude-standard |
		(cd "$src" && xargs -0 -r cp --parents -a -t "$stage" --)
else
	tar -C "$src" --exclude='./build' --exclude='./build-*' -cf - . | tar -C "$stage" -xf -
fi

# Binary only (-b), unsigned; parallel as the caller's make -j.
echo "build-deb: building softverbs $version in $stage"
(cd "$stage" && DEB_BUILD_OPTIONS="parallel=${JOBS:-$(nproc)} ${DEB_BUILD_OPTIONS:-}" \
	dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1 || {
	tail -n 60 "$out/build.log" >&2
	echo "build-deb: dpkg-buildpackage failed; whole log in $out/build.log" >&2
	exit 1
}
rm -rf "$stage"
ls -1 "$out"/softverbs_"$version"_*.deb
