#!/usr/bin/env python3
"""bench/auth_probe.py (bench/auth-guess.sh): connect to a softverbs endpoint
as someone who does not hold the secret, say HELLO, and report every frame
that comes back.  If one of them is keyed material (an AUTH: wire version 3),
run the offline guessing loop against it in Python for a few seconds and
report the rate, and whether the guess list held the secret.

  auth_probe.py HOST PORT VERSION [--secret S] [--seconds N]

VERSION is the endpoint's wire version (3 before, 4 after); --secret S is
put last in the guess list, to show that a hit is recognised.
"""
import argparse, ctypes, ctypes.util, hashlib, hmac, os, socket, struct, time

V3_LABEL = b"softverbs peer authentication, wire version 3"


def hello(version, to_port):
    h = struct.pack(">IHH16sHH16s", 0x53565242, version, 0, bytes(16), to_port, 40999,
                    os.urandom(16))
    if version >= 4:  # a share: a random ristretto255 element (libsodium)
        lib = ctypes.CDLL(ctypes.util.find_library("sodium"))
        if lib.sodium_init() < 0:
            raise SystemExit("libsodium failed to start")
        share = ctypes.create_string_buffer(32)
        lib.crypto_core_ristretto255_random(share)
        h += share.raw
    return h


def frames(sock, wait):
    """(length, body) of each frame that arrives within wait seconds."""
    sock.settimeout(wait)
    buf, out, end = b"", [], time.time() + wait
    while time.time() < end:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            break
        if not d:
            out.append(("closed", b""))
            break
        buf += d
        while len(buf) >= 4:
            n = struct.unpack(">I", buf[:4])[0]
            if len(buf) < 4 + n:
                break
            out.append(("frame", buf[4:4 + n]))
            buf = buf[4 + n:]
    return out


def kind(body):
    if len(body) >= 4 and struct.unpack(">I", body[:4])[0] == 0x53565242:
        return "HELLO (%d bytes)" % len(body)
    if len(body) == 36 and struct.unpack(">I", body[:4])[0] == 0x53564155:
        return "AUTH (36 bytes): keyed material"
    return "other (%d bytes)" % len(body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("version", type=int)
    ap.add_argument("--secret", default=None)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    mine = hello(a.version, a.port)
    s = socket.create_connection((a.host, a.port))
    s.sendall(struct.pack(">I", len(mine)) + mine)
    got = frames(s, 1.0)
    theirs, auth = None, None
    for what, body in got:
        if what == "closed":
            print("probe: connection closed by the endpoint")
            continue
        print("probe: received", kind(body))
        if kind(body).startswith("HELLO"):
            theirs = body
        elif kind(body).startswith("AUTH"):
            auth = body[4:]
    if auth is None:
        print("probe: no keyed material: nothing to test guesses against offline")
        return
    # v3: the accepting side's MAC: HMAC(BLAKE2b(secret), label | 'A' | its HELLO | ours)
    msg = V3_LABEL + b"A" + theirs + mine
    n, hit, t0 = 0, None, time.process_time()
    while time.process_time() - t0 < a.seconds:
        for i in range(1000):
            g = b"guess-%d" % (n + i)
            k = hashlib.blake2b(g, digest_size=32, key=V3_LABEL).digest()
            if hmac.compare_digest(hmac.new(k, msg, hashlib.sha256).digest(), auth):
                hit = g
        n += 1000
    rate = n / (time.process_time() - t0)
    if a.secret is not None:
        k = hashlib.blake2b(a.secret.encode(), digest_size=32, key=V3_LABEL).digest()
        if hmac.compare_digest(hmac.new(k, msg, hashlib.sha256).digest(), auth):
            hit = a.secret.encode()
    print("probe: offline guessing in Python: %.0f guesses/s on one core; secret %s" %
          (rate, "FOUND: %r" % hit.decode() if hit else "not in the list"))


main()
