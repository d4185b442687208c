#!/usr/bin/env bash
# The folder layering of src/, checked from the #include lines themselves.
#
#   scripts/check-layers.sh [--graph] [SRC_DIR]     (SRC_DIR: default src/ beside scripts/)
#
# Every folder of src/ has a place in LAYERS below, lowest first.  A file may
# include headers of its own folder and of folders below its own, never of a
# folder above it: so the folder graph has no cycle and reads bottom up.  The
# includes are the project's quoted ones, named from src/ ("wire/wire.h", the
# build's only include directory); a bare "x.h" or "./x.h" / "../y/x.h" is
# resolved against the including file's folder.  Quoted includes that name no
# folder of src/ are not the project's and are not looked at.
#
# Fails (exit 1), naming each offending include as file:line, on
#   - a cycle between folders (each edge of it, with one include that makes it),
#   - an include that goes up the order (every one of them),
#   - a folder of src/ that LAYERS does not place.
# --graph prints the folder graph (edge, number of includes) and exits 0.
# Run by CTest as static.layers (tests/CMakeLists.txt).
set -euo pipefail

# The one declared order, lowest first.  common: helpers of every layer;
# stats: the counters' shared-memory layout and reader, used by engine, verbs,
# preload and tools; wire: the packet format (headers, opcode table), below
# both the transports that frame packets and the engine that builds them;
# transport: moving frames between peers; engine: the HCA (roles, memory,
# progress), which drives the transports; verbs: the verbs objects; rdmacm:
# the connection manager library; abi: the ABI surface of libibverbs;
# preload: the /sys and /dev view for middleware (its own library).
LAYERS="common stats wire transport engine verbs rdmacm abi preload"

graph=0
if [ "${1:-}" = "--graph" ]; then
	graph=1
	shift
fi
src=${1:-$(cd "$(dirname "$0")/.." && pwd)/src}
if [ ! -d "$src" ]; then
	echo "check-layers: no such folder: $src" >&2
	exit 2
fi
src=${src%/}

folders=$(cd "$src" && find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | tr '\n' ' ')

# file:line:text of every quoted include (grep: 1 is no match, 2 an error),
# then the awk below does the rest.
includes() {
	local rc=0
	cd "$src" || return 2
	grep -rnE --include='*.c' --include='*.h' \
		'^[[:space:]]*#[[:space:]]*include[[:space:]]*"' . || rc=$?
	[ "$rc" -le 1 ]
}
includes | sort -t: -k1,1 -k2,2n |
	awk -v layers="$LAYERS" -v folders="$folders" -v src="$src" -v graph="$graph" '
function norm(path,    n, parts, out, k, i) {
	# collapse "." and ".." in a relative path
	n = split(path, parts, "/")
	k = 0
	for (i = 1; i <= n; i++) {
		if (parts[i] == "" || parts[i] == ".")
			continue
		if (parts[i] == "..") {
			if (k > 0)
				k--
			else
				return ""  # above src/
			continue
		}
		out[++k] = parts[i]
	}
	path = ""
	for (i = 1; i <= k; i++)
		path = path (i > 1 ? "/" : "") out[i]
	return path
}
function dfs(u,    j, v, i, nxt) {
	# colour 1: on the stack; 2: done.  Prints every cycle found through a back edge.
	colour[u] = 1
	stack[++depth] = u
	for (j = 1; j <= nf; j++) {
		v = fl[j]
		if (!((u, v) in edge_where))
			continue
		if (colour[v] == 1) {
			ncycles++
			for (i = 1; i <= depth && stack[i] != v; i++)
				;
			printf "check-layers: folder cycle:"
			for (; i <= depth; i++)
				printf " %s ->", stack[i]
			printf " %s\n", v
			for (i = 1; i <= depth && stack[i] != v; i++)
				;
			for (; i <= depth; i++) {
				nxt = (i < depth) ? stack[i + 1] : v
				printf "  %s -> %s: %s\n", stack[i], nxt, edge_where[stack[i], nxt]
			}
		} else if (colour[v] == 0) {
			dfs(v)
		}
	}
	depth--
	colour[u] = 2
}
BEGIN {
	nl = split(layers, order, " ")
	for (i = 1; i <= nl; i++)
		rank[order[i]] = i
	nf = split(folders, fl, " ")
	for (i = 1; i <= nf; i++) {
		isfolder[fl[i]] = 1
		if (!(fl[i] in rank) && !graph) {
			printf "check-layers: src/%s/ has no place in LAYERS (scripts/check-layers.sh): add it where its includes put it\n", fl[i]
			unplaced++
		}
	}
}
{
	# ./engine/mcast.c:12:#include "wire/wire.h"
	line = $0
	file = line
	sub(/^\.\//, "", file)
	c = index(file, ":")
	lineno = substr(file, c + 1)
	file = substr(file, 1, c - 1)
	c = index(lineno, ":")
	lineno = substr(lineno, 1, c - 1)
	inc = line
	sub(/^[^"]*"/, "", inc)
	sub(/".*$/, "", inc)
	from = file
	if (index(from, "/") == 0)
		from = "."     # a file directly in src/
	else
		sub(/\/.*$/, "", from)
	dir = file
	sub(/\/[^\/]*$/, "", dir)
	if (index(file, "/") == 0)
		dir = ""
	if (inc ~ /^\.\.?\// || index(inc, "/") == 0)
		target = norm((dir == "" ? "" : dir "/") inc)
	else
		target = norm(inc)
	if (target == "" || index(target, "/") == 0)
		to = "."
	else {
		to = target
		sub(/\/.*$/, "", to)
	}
	if (to == "." && from == ".")
		next
	if (to != "." && !(to in isfolder))
		next   # not one of the project folders: a system header in quotes
	nincludes++
	if (from == to)
		next
	where = "src/" file ":" lineno ": #include \"" inc "\""
	if (!((from, to) in edge_where))
		edge_where[from, to] = where
	edge_count[from, to]++
	if ((from == "." || to == ".") && !graph) {
		printf "check-layers: a file directly in src/ has no layer: %s\n", where
		unplaced++
		next
	}
	if (!(from in rank) || !(to in rank))
		next   # reported once above
	if (rank[to] > rank[from] && !graph) {
		printf "check-layers: %s includes upward (%s is below %s in LAYERS): %s\n", from, from, to, where
		bad++
	}
}
END {
	if (graph) {
		for (k in edge_count) {
			split(k, p, SUBSEP)
			printf "%s -> %s %d\n", p[1], p[2], edge_count[k] | "sort"
		}
		exit 0
	}
	for (i = 1; i <= nf; i++)
		if (colour[fl[i]] == 0)
			dfs(fl[i])
	if (bad || ncycles || unplaced) {
		printf "check-layers: FAILED: %d upward include(s), %d folder cycle(s), %d folder(s) not in LAYERS; order (lowest first): %s\n", bad, ncycles, unplaced, layers
		exit 1
	}
	printf "check-layers: ok: %d quoted includes in %s, folders in order (lowest first): %s; no cycle\n", nincludes, src, layers
}'
