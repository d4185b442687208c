#!/bin/bash
# man.sh SOURCE_DIR: the man pages format without a warning from groff, and
# softverbs(7) documents every environment variable the sources read (each
# "SOFTVERBS_*", "SYSFS_PATH" and "XDG_RUNTIME_DIR" string in src/ and
# tools/ must appear as a tagged entry, ".B NAME", in the page).
set -euo pipefail
src=$1
command -v groff >/dev/null 2>&1 ||
	{ echo "SKIP: groff not installed: install Debian package groff-base (apt-get install groff-base)"; exit 77; }
rc=0
for page in "$src"/docs/man/*.[1-8]; do
	out=$(groff -man -ww -z -t "$page" 2>&1)
	if [ -n "$out" ]; then
		echo "FAIL: groff warns about $page:"
		echo "$out"
		rc=1
	fi
done
vars=$(grep -rhoE '"(SOFTVERBS_[A-Z0-9_]+|SYSFS_PATH|XDG_RUNTIME_DIR)"' "$src/src" "$src/tools" |
	tr -d '"' | sort -u)
[ -n "$vars" ] || { echo "FAIL: found no variable in the sources"; exit 1; }
for v in $vars; do
	if ! grep -qE "^\.BR? $v( |\$)" "$src/docs/man/softverbs.7"; then
		echo "FAIL: softverbs(7) does not document $v"
		rc=1
	fi
done
[ "$rc" = 0 ] && echo "PASS: $(echo "$vars" | wc -l) variables documented: $(echo $vars)"
exit "$rc"
