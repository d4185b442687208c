#!/usr/bin/env bash
# bench/auth-guess.sh: what a guess of the secret costs someone who holds
# keyed material to test it against offline (docs/SECURITY.md, "Guessing
# the secret"); not part of `make test`.
#
#   bench/auth-guess.sh          # the rates, before and after, on one core
#   PROBE=1 bench/auth-guess.sh  # also: a live device (ibv_rc_pingpong under
#                                # softverbs, SOFTVERBS_SECRET set) and what
#                                # a HELLO from someone without the secret
#                                # draws from it (bench/auth_probe.py)
#
# It builds bench/auth_guess.c against libsodium and src/transport/auth.h
# (the KDF's parameters as the library has them) and prints:
#   - before (wire version 3): guesses a second on one core against the
#     AUTH the accepting side used to send to anyone (BLAKE2b + HMAC);
#   - after (wire version 4): the CPU time of one Argon2id with the
#     library's parameters, and the guesses a second that leaves one core.
# With PROBE=1 it then starts ibv_rc_pingpong as a server under
# build/bin/softverbs (run `make` first) and connects to its endpoint as
# an outsider: the frames that come back are listed, and if one is keyed
# (a v3 device) the probe guesses against it in Python and reports the rate.
# KDF_RUNS=N sets how many derivations are timed (default 5).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${TMPDIR:-/tmp}/softverbs-auth-guess.$$
mkdir -p "$OUT"
trap '[ -z "${SRV:-}" ] || kill "$SRV" 2>/dev/null || true; rm -rf "$OUT"' EXIT

${CC:-cc} -O2 -std=gnu11 -Wall -Wextra -I"$ROOT/src" "$ROOT/bench/auth_guess.c" \
	$(pkg-config --cflags --libs libsodium) -o "$OUT/auth_guess"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
"$OUT/auth_guess" "${KDF_RUNS:-5}"

[ "${PROBE:-0}" = 1 ] || exit 0
SECRET="correct horse battery staple"
SOFTVERBS_LOOPBACK=1 SOFTVERBS_LOG=debug SOFTVERBS_SECRET="$SECRET" \
	timeout 60 "$ROOT/build/bin/softverbs" run -- ibv_rc_pingpong -d sv_lo -g 0 -p 18997 \
	>"$OUT/server.log" 2>&1 &
SRV=$!
for _ in $(seq 50); do
	grep -q "endpoint 127.0.0.1:" "$OUT/server.log" && grep -q "derived the key" "$OUT/server.log" && break
	sleep 0.1
done
PORT=$(grep -o "endpoint 127.0.0.1:[0-9]*" "$OUT/server.log" | head -1 | cut -d: -f2)
grep "derived the key" "$OUT/server.log" | sed 's/^/server: /' || true
python3 "$ROOT/bench/auth_probe.py" 127.0.0.1 "$PORT" 4 --secret "$SECRET"
