#!/usr/bin/env bash
# After ctest (make test, make test-full): what was not checked here, and why.
#
#   scripts/test-summary.sh BUILD_DIR
#
# CTest shows a skipped test as "Not Run (Skipped)" and no more.  Every test
# that skips prints "SKIP: reason" first (svt_skip, sv_skip, the Python
# tests), the reason naming the package to install or what else to do; this
# reads those lines back from the last run's log (Testing/Temporary/
# LastTest.log) and lists each reason once, with how many tests gave it and
# a few of their names.  Prints nothing when nothing skipped.
set -euo pipefail

log=${1:-build}/Testing/Temporary/LastTest.log
[ -r "$log" ] || exit 0

awk '
/^[0-9]+\/[0-9]+ Test: / { name = $3; next }
/^SKIP: / {
	reason = substr($0, 7)
	if (!(reason in count)) order[n++] = reason
	if (count[reason] < 3) names[reason] = names[reason] (count[reason] ? ", " : "") name
	count[reason]++
	total++
}
END {
	if (!total) exit
	printf "\nSkipped here, not checked (%d test%s), and what to do:\n", total, (total > 1 ? "s" : "")
	for (i = 0; i < n; i++) {
		r = order[i]
		more = count[r] > 3 ? sprintf(" and %d more", count[r] - 3) : ""
		which = count[r] > 1 ? sprintf("%d tests: ", count[r]) : ""
		printf "  - %s\n      (%s%s%s)\n", r, which, names[r], more
	}
}' "$log"
