#!/usr/bin/python3
"""transport_rocev2_inject: packets that scapy built (not softverbs) sent into
a softverbs RC QP over UDP port 4791, and what softverbs does and answers.

  rocev2_inject.py PATH_TO_rocev2_agent

Two network namespaces joined by a veth: in A, rocev2_agent (over
SOFTVERBS_TRANSPORT=rocev2, device sv_sva, 10.211.48.1) with an RC QP
connected to GID ::ffff:10.211.48.2 (B), QPN 0x000123, expected PSN 0x100,
and a 1 MiB buffer registered with REMOTE_WRITE | READ | ATOMIC.  This
script moves itself into B (setns), where a UDP socket bound to port 4791
sends scapy's packets (IPv4 as Linux sends them from an unconnected socket:
identification 0, DF; ICRC computed by scapy) and a raw socket sees every
datagram that comes back with its IP header, whose ICRC scapy checks.

Asserted, in order (E: the PSN the QP expects):
  1. RDMA WRITE ONLY (AckReq) at E: the bytes are in memory; one ACK (AETH
     syndrome 000xxxxx, PSN E, MSN = the number of messages done).
  2. SEND ONLY into a posted receive: a receive completion of the right
     length, the bytes in the buffer, an ACK of its PSN.
  3. READ REQUEST of 200 bytes: one READ RESPONSE ONLY, PSN E, the bytes;
     of 2500 bytes: READ RESPONSE FIRST, MIDDLE, LAST at E, E+1, E+2 (MTU
     1024), together the bytes.
 3b. WRITE FIRST, MIDDLE, LAST of 2500 bytes (AckReq on the last): written,
     one ACK of the last PSN; SEND FIRST, MIDDLE, LAST WITH IMMEDIATE into
     a posted receive: a completion of 2500 bytes with the immediate.
  4. FETCH_ADD: an ATOMIC ACKNOWLEDGE with the original value, memory
     added to; COMPARE_SWAP the same, memory swapped.
  5. A WRITE whose ICRC is wrong: no answer, memory unchanged.
 5a. WRITEs that differ where the ICRC masks or a sender may choose: IPv4
     TOS 0x03 (ECN CE), TTL 1, BTH FECN and BECN set, UDP source port 49999,
     UDP checksum 0 (none): each executed once and ACKed.  The two marked
     congested (ECN CE, FECN) draw exactly one CNP each beside the ACK:
     opcode 0x81, BECN set and FECN clear, DestQP = our QPN, PSN 0, P_Key
     0xffff, no pad, 16 zero reserved bytes, an ICRC scapy agrees with; the
     QP's ecn_marked_packets and cnp_sent go up by one (by none for the
     others).
 5b. A valid WRITE in an IPv4 datagram whose identification is 0x1234
     (sent through a raw socket; rxe numbers its datagrams, and the ICRC
     covers the identification): executed and ACKed.
 5c. 16 CE-marked WRITEs at once (queued in the agent's socket while it is
     stopped; AckReq on the last): all executed and ACKed, at least one CNP
     and fewer than 16 (at most one per QP every 50 us), cnp_sent as many
     as came, ecn_marked_packets +16.
 5d. A CNP (scapy's, BECN, DestQP = the softverbs QP) into the QP: no
     answer, cnp_received +1, and the next WRITE is executed and ACKed.
  6. A WRITE at E+5 (PSN ahead): exactly one NAK, syndrome 0x60 (PSN
     sequence error) naming E; a second one at E+6: no second NAK; neither
     executed.  Then the WRITE at E: executed, ACKed.
  7. The same WRITE again (duplicate, PSN E-1) with other bytes: one ACK
     of E-1 (IBA C9-105), not executed again (memory keeps the first bytes);
     a duplicate READ request is executed again (IBA 9.9.2.1: the data).
  8. A WRITE to a QPN with no QP: no answer, nothing written.
  9. A WRITE at the expected PSN still works (nothing above broke the
     QP's state).
 10. A WRITE with a wrong rkey: NAK remote access error (0x62), nothing
     written.
 11. Scapy as the RESPONDER of a second RC QP of the agent (remote QPN
     0x456 + the try, SQ PSN F = 0xfffff0: the PSNs wrap): the agent WRITEs
     256 KiB (256 packets, MTU 1024); its congestion window stops it midway.
     After 20 packets scapy NAKs (0x60) PSN F+10.  The first packet sent
     again is F+10 exactly (not F: 1902b03), and then no retransmit probe and
     no ack timeout had come (counters read with the agent stopped); the NAK
     acknowledged F..F+9 and, a loss, halved the window, so from F+10 the
     agent sends half its first window before scapy ACKs anything.  Then scapy ACKs in order to the end: the
     WRITE completes successfully, and the bytes scapy reassembles by PSN
     (WRITE FIRST with the RETH, MIDDLEs, LAST) are the agent's buffer.  Up to
     3 tries of this step (on a busy host the probe, 10 ms after the window
     closed, may beat scapy's NAK); each try's packets checked as below.
Every packet softverbs sends must carry a valid ICRC (scapy), destination
QPN 0x123 (step 11: 0x456), IP ECN ECT(0), and come from UDP to port 4791.

The counters are the agent's QP's in `softverbs stat --json --pid PID`
(SV_TOOL, else the softverbs next to the agent).

Exits 77 without root or python3-scapy.
"""
import ctypes
import json
import os
import shutil
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rocev2_lib import Agent, AgentError  # noqa: E402

try:
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
    from scapy.contrib.roce import BTH, cnp
except ImportError:
    print("SKIP: scapy's RoCE layer (scapy.contrib.roce) not found: install Debian package "
          "python3-scapy (apt-get install python3-scapy; scripts/install-deps.sh --all "
          "installs every package the tests use)")
    sys.exit(77)

if os.geteuid() != 0:
    print("SKIP: needs root for network namespaces: run the tests as root (sudo make test) "
          "to include it")
    sys.exit(77)

NET = 48
A_IP, B_IP = f"10.211.{NET}.1", f"10.211.{NET}.2"
OUR_QPN = 0x000123
MTU = 1024
fails = []
t0 = time.monotonic()


def fail(msg):
    fails.append(msg)
    print("FAIL:", msg, flush=True)


def log(msg):
    print(f"-- [{time.monotonic() - t0:5.1f}s] {msg}", flush=True)


def sh(*argv):
    subprocess.run(argv, check=True)


# ------------------------------------------------------------ namespaces ----
ns_a, ns_b = f"svt-inj-{os.getpid()}-a", f"svt-inj-{os.getpid()}-b"
made = []


def cleanup():
    for ns in made:
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def setup():
    for ns in (ns_a, ns_b):
        r = subprocess.run(["ip", "netns", "add", ns], stderr=subprocess.PIPE, text=True)
        if r.returncode:
            print(f"SKIP: ip netns add failed here ({r.stderr.strip()}): network namespaces "
                  "need CAP_SYS_ADMIN, which an unprivileged container does not give")
            cleanup()
            sys.exit(77)
        made.append(ns)
    sh("ip", "-n", ns_a, "link", "add", "sva", "type", "veth", "peer", "name", "svb",
       "netns", ns_b)
    sh("ip", "-n", ns_a, "addr", "add", f"{A_IP}/24", "dev", "sva")
    sh("ip", "-n", ns_b, "addr", "add", f"{B_IP}/24", "dev", "svb")
    for ns, dev in ((ns_a, "sva"), (ns_b, "svb")):
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")
        # softverbs' runs of datagrams (UDP GSO) cut into packets as they
        # leave, as a NIC without segmentation offload does: the raw socket
        # here sees each packet, not a run (tests/clients/lib.sh,
        # sv_wire_packets); without ethtool a datagram each
        if shutil.which("ethtool"):
            sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx-udp-segmentation", "off")
        else:
            os.environ["SOFTVERBS_ROCEV2_GSO"] = "0"
    end = time.monotonic() + 5
    while time.monotonic() < end:
        up = all(b"LOWER_UP" in subprocess.run(["ip", "-n", ns, "link", "show", dev],
                                               capture_output=True).stdout
                 for ns, dev in ((ns_a, "sva"), (ns_b, "svb")))
        if up:
            break
        time.sleep(0.05)
    # this process moves to B: its sockets are the peer's
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{ns_b}", os.O_RDONLY)
    if libc.setns(fd, 0x40000000):  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "setns")
    os.close(fd)


# ---------------------------------------------------------------- wire ----
class Wire:
    def __init__(self, target_qpn):
        self.qpn = target_qpn
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tx.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER: IP_PMTUDISC_DO
        self.tx.bind((B_IP, 4791))
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.rx.setblocking(False)
        self.seen = 0

    def build(self, op, psn, ext=b"", payload=b"", dqpn=None, ackreq=1, bad_icrc=False):
        pad = (-len(payload)) % 4
        p = IP(src=B_IP, dst=A_IP, id=0, flags="DF", ttl=64) / UDP(sport=4791, dport=4791) / \
            BTH(opcode=op, dqpn=self.qpn if dqpn is None else dqpn, psn=psn & 0xffffff,
                ackreq=ackreq, padcount=pad) / Raw(ext + payload + b"\0" * pad)
        dgram = bytearray(bytes(p)[28:])  # the UDP payload: BTH ... ICRC
        if bad_icrc:
            dgram[-1] ^= 0x5a
        return bytes(dgram)

    def send(self, *args, **kw):
        self.drain()
        self.tx.sendto(self.build(*args, **kw), (A_IP, 4791))

    def drain(self):
        while True:
            try:
                self.rx.recv(65536)
            except BlockingIOError:
                break
        try:
            while self.tx.recv(65536, socket.MSG_DONTWAIT):
                pass
        except BlockingIOError:
            pass

    def responses(self, want, timeout=1.5, quiet=0.3):
        """Packets from A to our 4791 until WANT came (then QUIET s more, to
        catch extras) or TIMEOUT.  Each: (BTH, bytes after the BTH)."""
        out = []
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if len(out) >= want:
                left = min(left, quiet)
                end = min(end, time.monotonic() + quiet)
            if left <= 0:
                break
            r, _, _ = select.select([self.rx], [], [], left)
            if not r:
                continue
            data = self.rx.recv(65536)
            p = IP(data)
            if UDP not in p or p[IP].src != A_IP or p[UDP].dport != 4791:
                continue
            self.seen += 1
            if BTH not in p:
                fail(f"a datagram from softverbs scapy reads no BTH in: {data.hex()}")
                continue
            b = p[BTH]
            if struct.pack("!I", b.icrc) != b.compute_icrc(None):
                fail(f"softverbs' opcode {b.opcode:#x} PSN {b.psn:#x}: ICRC {b.icrc:#010x}, "
                     f"scapy computes {struct.unpack('!I', b.compute_icrc(None))[0]:#010x}")
            if b.dqpn != OUR_QPN:
                fail(f"softverbs' opcode {b.opcode:#x} to QPN {b.dqpn:#x}, ours {OUR_QPN:#x}")
            # DF; the identification is 0 for a datagram sent alone, and
            # counts up from 0 through a run the kernel cut (UDP GSO,
            # rocev2.c): the ICRC above, which covers it, says it is right
            if not p[IP].flags.DF:
                fail(f"softverbs' IP header: id {p[IP].id}, flags {p[IP].flags}")
            if p[IP].tos & 3 != 2:
                fail(f"softverbs' opcode {b.opcode:#x} PSN {b.psn:#x}: IP ECN "
                     f"{p[IP].tos & 3:#04b}, expected ECT(0) 0b10")
            body = bytes(b.payload)
            if b.padcount:
                body = body[:-b.padcount]
            out.append((b, body))
        return out


def reth(va, rkey, length):
    return struct.pack("!QII", va, rkey, length)


def atomic_eth(va, rkey, swap_add, cmp=0):
    return struct.pack("!QIQQ", va, rkey, swap_add, cmp)


def describe(rs):
    return [f"op {b.opcode:#x} psn {b.psn:#x} aeth {body[:4].hex()}" for b, body in rs]


def check_cnp(b, body, what):
    """B, BODY: a CNP as IBA annex A17.9.2 gives it (byte 4 of the BTH 0x40:
    BECN; the requester's QPN; 16 reserved bytes, zero), its ICRC scapy's."""
    want = dict(opcode=0x81, becn=1, fecn=0, resv6=0, dqpn=OUR_QPN, psn=0, pkey=0xffff,
                padcount=0, version=0)
    bad = [f"{k} {getattr(b, k):#x} (expected {v:#x})" for k, v in want.items()
           if getattr(b, k) != v]
    if body != bytes(16):
        bad.append(f"{len(body)} bytes after the BTH ({body.hex()}), expected 16 zero bytes")
    if struct.pack("!I", b.icrc) != b.compute_icrc(None):
        bad.append(f"ICRC {b.icrc:#010x}, scapy computes "
                   f"{struct.unpack('!I', b.compute_icrc(None))[0]:#010x}")
    if bad:
        fail(f"{what}: CNP with " + ", ".join(bad))


class Counters:
    """The agent's QP's counters, as `softverbs stat --json --pid PID` shows
    them (the stats files are read from any network namespace)."""

    def __init__(self, tool, pid, qpn):
        self.tool, self.pid, self.qpn = tool, pid, qpn

    def stat(self):
        r = subprocess.run([self.tool, "stat", "--json", "--pid", str(self.pid)],
                           capture_output=True, text=True, timeout=10)
        if r.returncode:
            raise AgentError(f"softverbs stat exited {r.returncode}: {r.stderr.strip()}")
        return [q for c in json.loads(r.stdout)["contexts"] for q in c.get("qps", [])]

    def get(self):
        for q in self.stat():
            if q["qpn"] == self.qpn:
                return q["counters"]
        raise AgentError(f"softverbs stat --pid {self.pid}: no QP {self.qpn:#x}")

    def no_qp(self):
        """A QPN of the agent's block that none of its QPs has (its QPNs
        are a permutation of their slots: any number of the block may be
        one)."""
        held = {q["qpn"] for q in self.stat()}
        n = self.qpn + 7
        while n in held or (n >> 14) != (self.qpn >> 14):
            n = (self.qpn & ~0x3fff) | ((n + 1) & 0x3fff)
        return n

    def expect(self, before, what, **want):
        """Each counter of WANT went up by exactly that since BEFORE; now's."""
        now = self.get()
        for k, v in want.items():
            if now[k] - before[k] != v:
                fail(f"{what}: {k} went up by {now[k] - before[k]}, expected {v}")
        return now


def main():
    agent_path = sys.argv[1]
    tool = os.environ.get("SV_TOOL") or \
        os.path.join(os.path.dirname(os.path.abspath(agent_path)), "softverbs")
    if not os.access(tool, os.X_OK):
        print(f"FAIL: softverbs tool not found (SV_TOOL='{tool}')")
        sys.exit(1)
    setup()
    log(f"netns {ns_a} (sva {A_IP}, softverbs) <-> {ns_b} (svb {B_IP}, scapy)")
    agentlog = open(os.devnull if not os.environ.get("SV_INJECT_LOG") else
                    os.environ["SV_INJECT_LOG"], "ab")
    agent = Agent(agent_path, ns_a, "sv_sva", agentlog)
    try:
        w = run(agent, tool)
        nak_midway(agent, tool, w)
    finally:
        rc = agent.close()
        if rc:
            fail(f"agent exited {rc}")


def run(agent, tool):
    rnd = random.Random(4791)
    info = agent.info()
    idx, qpn = agent.qp("rc")
    counters = Counters(tool, agent.p.pid, qpn)
    E = 0x100
    agent.cmd(f"connect {idx} {OUR_QPN:#x} {E:#x} ::ffff:{B_IP} 0x500 {MTU}")
    addr, rkey = int(info["addr"], 16), int(info["rkey"], 16)
    log(f"target: QPN {qpn:#x}, rkey {rkey:#x}, addr {addr:#x}, expects PSN {E:#x}")
    w = Wire(qpn)
    msn = 0

    def data(n):
        return bytes(rnd.randrange(256) for _ in range(n))

    def expect_ack(rs, psn, what, syndrome_class=0, syndrome=None, count_msn=True):
        nonlocal msn
        if len(rs) != 1:
            fail(f"{what}: {len(rs)} answers {describe(rs)}, expected one ACK/NAK")
            return
        b, body = rs[0]
        if b.opcode != 0x11:
            fail(f"{what}: answer opcode {b.opcode:#x}, expected ACKNOWLEDGE 0x11")
            return
        syn, m = body[0], int.from_bytes(body[1:4], "big")
        if (syn != syndrome) if syndrome is not None else (syn >> 5 != syndrome_class):
            fail(f"{what}: AETH syndrome {syn:#04x}, expected "
                 f"{syndrome if syndrome is not None else syndrome_class << 5:#04x}")
        if b.psn != psn & 0xffffff:
            fail(f"{what}: ACK/NAK PSN {b.psn:#x}, expected {psn:#x}")
        if count_msn and m != msn:
            fail(f"{what}: MSN {m}, expected {msn}")

    def write_ok(off, what):
        """a WRITE ONLY of 64 bytes at E: written, ACKed"""
        nonlocal E, msn
        d = data(64)
        w.send(0x0a, E, reth(addr + off, rkey, 64), d)
        msn += 1
        expect_ack(w.responses(1), E, what)
        if agent.peek(off, 64) != d:
            fail(f"{what}: memory not written")
        E += 1
        return d

    # 1. RDMA WRITE ONLY
    write_ok(0x1000, "1 WRITE ONLY")
    log("1 RDMA WRITE ONLY: written, ACKed")

    # 2. SEND ONLY into a posted receive
    agent.cmd(f"recv {idx} {0x2000} 4096 77")
    d2 = data(50)
    w.send(0x04, E, b"", d2)
    msn += 1
    expect_ack(w.responses(1), E, "2 SEND ONLY")
    wc = agent.poll(1)
    if len(wc) != 1 or wc[0]["status"] != "0" or wc[0]["wrid"] != "77" or \
            int(wc[0]["len"]) != 50 or wc[0]["opcode"] != "128":
        fail(f"2 SEND ONLY: receive completion {wc}, expected wrid 77 RECV len 50 status 0")
    if agent.peek(0x2000, 50) != d2:
        fail("2 SEND ONLY: received bytes differ")
    E += 1
    log("2 SEND ONLY: received (completion of 50 bytes), ACKed")

    # 3. READ
    d3 = data(2500)
    agent.poke(0x3000, d3)
    read1_psn = E
    w.send(0x0c, E, reth(addr + 0x3000, rkey, 200))
    msn += 1
    rs = w.responses(1)
    if [b.opcode for b, _ in rs] != [0x10]:
        fail(f"3 READ 200: answers {describe(rs)}, expected one READ RESPONSE ONLY")
    else:
        b, body = rs[0]
        if b.psn != E or body[0] >> 5 != 0 or body[4:] != d3[:200]:
            fail(f"3 READ 200: PSN {b.psn:#x} (expected {E:#x}), AETH {body[:4].hex()}, "
                 f"{'right' if body[4:] == d3[:200] else 'wrong'} bytes ({len(body) - 4})")
        elif int.from_bytes(body[1:4], "big") != msn:
            fail(f"3 READ 200: MSN {int.from_bytes(body[1:4], 'big')}, expected {msn}")
    E += 1
    w.send(0x0c, E, reth(addr + 0x3000, rkey, 2500))
    msn += 1
    rs = w.responses(3)
    if [b.opcode for b, _ in rs] != [0x0d, 0x0e, 0x0f]:
        fail(f"3 READ 2500: answers {describe(rs)}, expected READ RESPONSE FIRST, MIDDLE, LAST")
    else:
        got = rs[0][1][4:] + rs[1][1] + rs[2][1][4:]
        if [b.psn for b, _ in rs] != [E, E + 1, E + 2] or got != d3:
            fail(f"3 READ 2500: PSNs {[hex(b.psn) for b, _ in rs]} (expected from {E:#x}), "
                 f"{'right' if got == d3 else 'wrong'} bytes ({len(got)})")
    E += 3
    log("3 READ REQUEST: READ RESPONSE ONLY / FIRST, MIDDLE, LAST with the bytes")

    # 3b. multi-packet messages: WRITE FIRST, MIDDLE, LAST; SEND FIRST,
    # MIDDLE, LAST WITH IMMEDIATE into a posted receive (AckReq on the last)
    d = data(2500)
    parts = [d[:MTU], d[MTU:2 * MTU], d[2 * MTU:]]
    w.send(0x06, E, reth(addr + 0x9000, rkey, 2500), parts[0], ackreq=0)
    w.send(0x07, E + 1, b"", parts[1], ackreq=0)
    w.send(0x08, E + 2, b"", parts[2])
    msn += 1
    expect_ack(w.responses(1), E + 2, "3b WRITE FIRST, MIDDLE, LAST")
    if agent.peek(0x9000, 2500) != d:
        fail("3b WRITE FIRST, MIDDLE, LAST: memory not written")
    E += 3
    agent.cmd(f"recv {idx} {0xa000} 4096 78")
    d = data(2500)
    parts = [d[:MTU], d[MTU:2 * MTU], d[2 * MTU:]]
    w.send(0x00, E, b"", parts[0], ackreq=0)
    w.send(0x01, E + 1, b"", parts[1], ackreq=0)
    w.send(0x03, E + 2, struct.pack("!I", 0xfeed1234), parts[2])
    msn += 1
    expect_ack(w.responses(1), E + 2, "3b SEND FIRST, MIDDLE, LAST WITH IMMEDIATE")
    wc = agent.poll(1)
    if len(wc) != 1 or wc[0]["status"] != "0" or wc[0]["wrid"] != "78" or \
            int(wc[0]["len"]) != 2500 or wc[0]["imm"] != "0xfeed1234" or wc[0]["opcode"] != "128":
        fail(f"3b SEND FIRST, MIDDLE, LAST WITH IMMEDIATE: completion {wc}, expected wrid 78 "
             "RECV len 2500 imm 0xfeed1234")
    if agent.peek(0xa000, 2500) != d:
        fail("3b SEND FIRST, MIDDLE, LAST WITH IMMEDIATE: received bytes differ")
    E += 3
    log("3b WRITE FIRST/MIDDLE/LAST and SEND FIRST/MIDDLE/LAST WITH IMMEDIATE (2500 "
        "bytes): written / received with the immediate, ACKed at the last PSN")

    # 4. atomics
    agent.poke(0x4000, struct.pack("<Q", 100))
    for what, op, ext, orig, after in (
            ("FETCH_ADD", 0x14, atomic_eth(addr + 0x4000, rkey, 7), 100, 107),
            ("COMPARE_SWAP", 0x13, atomic_eth(addr + 0x4000, rkey, 5, 107), 107, 5)):
        w.send(op, E, ext)
        msn += 1
        rs = w.responses(1)
        if [b.opcode for b, _ in rs] != [0x12]:
            fail(f"4 {what}: answers {describe(rs)}, expected one ATOMIC ACKNOWLEDGE")
        else:
            b, body = rs[0]
            got = struct.unpack("!Q", body[4:12])[0] if len(body) >= 12 else None
            if b.psn != E or body[0] >> 5 != 0 or got != orig:
                fail(f"4 {what}: PSN {b.psn:#x} (expected {E:#x}), AETH {body[:4].hex()}, "
                     f"original value {got} (expected {orig})")
        mem = struct.unpack("<Q", agent.peek(0x4000, 8))[0]
        if mem != after:
            fail(f"4 {what}: memory {mem}, expected {after}")
        E += 1
    log("4 FETCH_ADD, COMPARE_SWAP: ATOMIC ACKNOWLEDGE with the original value, memory updated")

    # 5. wrong ICRC
    before = agent.peek(0x5000, 64)
    w.send(0x0a, E, reth(addr + 0x5000, rkey, 64), data(64), bad_icrc=True)
    rs = w.responses(1, timeout=0.8)
    if rs:
        fail(f"5 bad ICRC: answered {describe(rs)}")
    if agent.peek(0x5000, 64) != before:
        fail("5 bad ICRC: memory written")
    log("5 WRITE with a wrong ICRC: ignored")

    def raw_pkt(off, psn, dn, ip={}, udp={}, bth={}):
        """a WRITE ONLY of DN at OFF, PSN, its IPv4 header by scapy"""
        p = IP(**dict(dict(src=B_IP, dst=A_IP, id=0, flags="DF", ttl=64), **ip)) / \
            UDP(**dict(dict(sport=4791, dport=4791), **udp)) / \
            BTH(**dict(dict(opcode=0x0a, dqpn=qpn, psn=psn & 0xffffff, ackreq=1), **bth)) / \
            Raw(reth(addr + off, rkey, len(dn)) + dn)
        p = IP(bytes(p))  # built: the checksums and scapy's ICRC filled in
        for k, v in udp.items():  # a checksum asked for (0: none) stays
            setattr(p[UDP], k, v)
        return bytes(p)

    def raw_send(*pkts):
        """PKTS (IPv4 datagrams) through a raw socket (IP_HDRINCL), at once"""
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        w.drain()
        for p in pkts:
            raw.sendto(p, (A_IP, 0))
        raw.close()

    def split_cnps(rs):
        return [r for r in rs if r[0].opcode == 0x81], [r for r in rs if r[0].opcode != 0x81]

    def raw_write(off, what, ip={}, udp={}, bth={}, cnps=0):
        """a WRITE ONLY at E, its IPv4 header by scapy (IP_HDRINCL); whether
        it was executed (then it must have been ACKed, and have drawn CNPS
        CNPs, each checked)"""
        nonlocal E, msn
        dn = data(64)
        raw_send(raw_pkt(off, E, dn, ip, udp, bth))
        rs = w.responses(1 + cnps, timeout=0.8)
        if agent.peek(off, 64) != dn:
            return False, rs
        cs, acks = split_cnps(rs)
        if len(cs) != cnps:
            fail(f"{what}: {len(cs)} CNPs among the answers {describe(rs)}, expected {cnps}")
        for b, body in cs:
            check_cnp(b, body, what)
        msn += 1
        expect_ack(acks, E, what)  # one ACK, MSN one more: executed once
        E += 1
        return True, rs

    # 5a. what the ICRC masks or a peer may choose: TOS (ECN CE), TTL, FECN
    # and BECN, a UDP source port other than 4791, no UDP checksum (0).  A
    # packet marked congested (IP ECN CE, or BTH FECN) is executed as any
    # other, and its responder QP also sends its requester a CNP (annex
    # A17.9.2), before the ACK
    for n, (what, cnps, kw) in enumerate((
            ("TOS 0x03 (ECN CE)", 1, dict(ip=dict(tos=0x03))),
            ("TTL 1", 0, dict(ip=dict(ttl=1))),
            ("BTH FECN and BECN set", 1, dict(bth=dict(fecn=1, becn=1))),
            ("UDP source port 49999", 0, dict(udp=dict(sport=49999))),
            ("UDP checksum 0", 0, dict(udp=dict(chksum=0))))):
        before = counters.get()
        ok, rs = raw_write(0x5400 + 0x40 * n, f"5a {what}", cnps=cnps, **kw)
        if not ok:
            fail(f"5a a valid WRITE with {what}: ignored ({describe(rs)})")
        counters.expect(before, f"5a {what}", ecn_marked_packets=cnps, cnp_sent=cnps,
                        duplicate_requests=0)
    log("5a WRITEs with ECN CE, TTL 1, FECN/BECN, another UDP source port, no UDP "
        "checksum: executed once, ACKed; ECN CE and FECN: one CNP each (0x81, BECN, "
        "DestQP ours, 16 zero bytes, ICRC right)")

    # 5b. a packet whose IPv4 identification is not 0 (the ICRC covers it:
    # IBA A17 masks only TOS, TTL and the checksums; Linux's rxe numbers its
    # datagrams), and the same corrupted besides: executed, then ignored
    ok, rs = raw_write(0x5800, "5b IP identification 0x1234", ip=dict(id=0x1234))
    if not ok:
        fail(f"5b a valid WRITE in an IPv4 datagram with identification 0x1234: "
             f"ignored ({describe(rs)})")
    log("5b WRITE in an IPv4 datagram with identification 0x1234: executed, ACKed")

    # 5c. CE-marked WRITEs at once: fewer CNPs than marked packets (a QP
    # sends at most one CNP every 50 us).  Two back to back are not enough
    # here: each CNP and ACK is a sendto whose veth delivery runs the peer
    # namespace's receive path inline (10-80 us each, perf probes), so two
    # requests are 60-140 us apart in the engine even when it reads them in
    # one batch, and each draws its CNP, as it may.  So BURST WRITEs (AckReq
    # on the last only: the suppressed ones then cost the engine ~10 us
    # each) are put into the agent's socket while it is stopped (SIGSTOP),
    # and its engine reads them in one batch when it goes on: at least one
    # CNP, fewer than BURST, cnp_sent as many as came, ecn_marked_packets
    # +BURST.  A preempted engine could still part them all by 50 us: up to
    # 3 tries; without the limit every try would draw BURST CNPs.
    BURST = 16
    tries = []
    for attempt in range(3):
        before = counters.get()
        ds = [data(64) for _ in range(BURST)]
        pkts = [raw_pkt(0x5c00 + 0x40 * k, E + k, ds[k], ip=dict(tos=0x03),
                        bth=dict(ackreq=int(k == BURST - 1))) for k in range(BURST)]
        w.drain()
        os.kill(agent.p.pid, signal.SIGSTOP)
        try:
            raw_send(*pkts)
            time.sleep(0.02)  # all through the veth, into the agent's socket
        finally:
            os.kill(agent.p.pid, signal.SIGCONT)
        rs = w.responses(2, timeout=1.0)  # a CNP, the ACK; the rest in the quiet
        cs, acks = split_cnps(rs)
        for b, body in cs:
            check_cnp(b, body, "5c")
        if any(agent.peek(0x5c00 + 0x40 * k, 64) != ds[k] for k in range(BURST)):
            fail(f"5c {BURST} CE-marked WRITEs: not all written (answers {describe(rs)})")
            return w  # the PSNs of what follows would be wrong
        msn += BURST
        last = (E + BURST - 1) & 0xffffff
        if not acks or any(body[0] >> 5 for _, body in acks) or acks[-1][0].psn != last or \
                int.from_bytes(acks[-1][1][1:4], "big") != msn:
            fail(f"5c {BURST} CE-marked WRITEs: answers {describe(rs)}, expected ACKs "
                 f"ending with PSN {last:#x} MSN {msn}")
        E += BURST
        now = counters.expect(before, f"5c {BURST} CE-marked WRITEs",
                              ecn_marked_packets=BURST, duplicate_requests=0)
        sent = now["cnp_sent"] - before["cnp_sent"]
        if sent != len(cs):
            fail(f"5c {BURST} CE-marked WRITEs: cnp_sent +{sent}, {len(cs)} CNPs came")
        tries.append(len(cs))
        if 1 <= len(cs) < BURST:
            break
    if not 1 <= tries[-1] < BURST:
        fail(f"5c {BURST} CE-marked WRITEs at once: CNPs per try {tries}, expected 1 to "
             f"{BURST - 1}")
    log(f"5c {BURST} CE-marked WRITEs at once: executed, ACKed, {tries[-1]} CNP(s) "
        f"(try {len(tries)})")

    # 5d. a CNP into the softverbs QP (from its peer, as a ConnectX NIC
    # would send one): counted, answered with nothing; the QP goes on
    before = counters.get()
    p = IP(src=B_IP, dst=A_IP, id=0, flags="DF", ttl=64) / UDP(sport=4791, dport=4791) / \
        cnp(qpn)
    w.drain()
    w.tx.sendto(bytes(p)[28:], (A_IP, 4791))
    rs = w.responses(1, timeout=0.5)
    if rs:
        fail(f"5d CNP into the QP: answered {describe(rs)}")
    write_ok(0x5d00, "5d WRITE after a CNP")
    counters.expect(before, "5d CNP into the QP", cnp_received=1, cnp_sent=0,
                    ecn_marked_packets=0)
    log("5d CNP into the softverbs QP: counted (cnp_received +1), not answered; the next "
        "WRITE executed, ACKed")

    # 6. PSN ahead
    w.send(0x0a, E + 5, reth(addr + 0x6000, rkey, 64), data(64))
    expect_ack(w.responses(1), E, "6 PSN ahead", syndrome=0x60, count_msn=False)
    w.send(0x0a, E + 6, reth(addr + 0x6000, rkey, 64), data(64))
    rs = w.responses(1, timeout=0.8)
    if rs:
        fail(f"6 PSN ahead again: answered {describe(rs)}, expected no second NAK")
    if agent.peek(0x6000, 64) != bytes(64):
        fail("6 PSN ahead: executed")
    d6 = write_ok(0x6000, "6 WRITE at the expected PSN after the NAK")
    log("6 PSN ahead: one NAK (0x60) naming the expected PSN, not executed; then in order")

    # 7. duplicates
    w.send(0x0a, E - 1, reth(addr + 0x6000, rkey, 64), data(64))
    rs = w.responses(1)
    if len(rs) != 1 or rs[0][0].opcode != 0x11 or rs[0][1][0] >> 5 != 0 or \
            rs[0][0].psn not in (E - 1, (E - 1) & 0xffffff):
        fail(f"7 duplicate WRITE: answers {describe(rs)}, expected one ACK of PSN {E - 1:#x}")
    if agent.peek(0x6000, 64) != d6:
        fail("7 duplicate WRITE: executed again (memory changed)")
    agent.poke(0x3000, b"\xee" * 200)
    w.send(0x0c, read1_psn, reth(addr + 0x3000, rkey, 200))
    rs = w.responses(1)
    if [b.opcode for b, _ in rs] != [0x10] or rs[0][0].psn != read1_psn or \
            rs[0][1][4:] != b"\xee" * 200:
        fail(f"7 duplicate READ: answers {describe(rs)}, expected READ RESPONSE ONLY PSN "
             f"{read1_psn:#x} with the memory's current bytes")
    log("7 duplicate WRITE: ACKed, not executed again; duplicate READ: answered again")

    # 8. wrong QPN, wrong rkey
    none = counters.no_qp()
    w.send(0x0a, E, reth(addr + 0x7000, rkey, 64), data(64), dqpn=none)
    rs = w.responses(1, timeout=0.8)
    if rs:
        fail(f"8 QPN {none:#x} (no QP): answered {describe(rs)}")
    if agent.peek(0x7000, 64) != bytes(64):
        fail("8 QPN with no QP: memory written")
    log("8 WRITE to a QPN with no QP: ignored")

    # 9. still alive
    write_ok(0x8000, "9 WRITE after all that")
    log(f"9 WRITE at PSN {E - 1:#x}: written, ACKed")

    # 10. wrong rkey (last: IBA may put the responder's QP in the error state)
    w.send(0x0a, E, reth(addr + 0x7000, rkey ^ 0x1000, 64), data(64))
    expect_ack(w.responses(1), E, "10 wrong rkey", syndrome_class=3, syndrome=0x62,
               count_msn=False)
    if agent.peek(0x7000, 64) != bytes(64):
        fail("10 wrong rkey: memory written")
    log(f"10 WRITE with a wrong rkey: NAK remote access error, not executed; "
        f"{w.seen} packets from softverbs, each with a valid ICRC")
    return w


# ------------------------------------------- 11. scapy as the responder ----
# Guards 1902b03.  Over rocev2 the requester keeps at most a congestion
# window of packets unacknowledged (engine/congestion.c), so a long WRITE is
# stopped midway.  A sequence NAK (AETH 0x60) naming a PSN inside that partly
# sent WQE was dropped as stale before 1902b03 (completer.c ack_before()
# skipped the WQE at sq->next), and only the ack timeout (67 ms at the
# agent's timeout 14) went back, and to the message's FIRST packet: 1 MiB
# WRITEs over a lossy veth never finished.  Since then the NAK acknowledges
# everything before its PSN and sends the requester back at once to exactly
# that PSN (go-back-N).  Here scapy plays the responder of an agent's RC QP
# that WRITEs 256 KiB; after 20 packets of the first window it NAKs PSN
# first+10 and watches what comes next.  Before 1902b03 the first packet
# sent again is `first` (ack_timeouts +1); with the NAK dropped now, it is
# `first` too, from the retransmission probe (retransmit_probes +1), which
# also comes first when scapy is too slow with its NAK: the probe waits 10 ms
# from the window's closing (no RTT sample yet), hence the tries.
GB_QPN = 0x000456      # the remote QP scapy plays (+ the try: a try's leftovers are told apart)
# the agent's SQ PSN: the window wraps.  Its first AckReq is F+15 (one each
# 16 PSNs, aligned), after the NAKed PSN: the NAK gives no RTT sample, so the
# probe waits 10 ms after it, not 4, while scapy reads the counters with the
# agent stopped (a probe due by then would come at once after SIGCONT: the
# engine's epoll_wait returns EINTR, and it fires its timers before it reads
# the ACKs scapy queued meanwhile)
GB_PSN = 0xfffff0
GB_OFF, GB_LEN = 0x80000, 256 * 1024
GB_RADDR, GB_RKEY = 0x7f5e00000000, 0x1902b0
GB_NAK_AT = 10         # the PSN (from the first) NAKed
GB_REACT = 20          # packets of the first window before the NAK


class ReqCapture:
    """The agent's requests to (B, 4791) for one QPN, read as they come (with
    struct, not scapy: the requester's probe waits only 4 to 10 ms), each
    kept whole for the ICRC check afterwards."""

    def __init__(self):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: none lost here
        self.s.setblocking(False)
        self.src = socket.inet_aton(A_IP)
        self.dqpn, self.first, self.raw = None, 0, []

    def start(self, dqpn, first):
        self.dqpn, self.first, self.raw = dqpn, first, []
        while True:
            try:
                self.s.recv(65536)
            except BlockingIOError:
                return

    def get(self, timeout):
        """(k: PSN - first, opcode, AckReq, bytes after the BTH) of the next
        request, or None after TIMEOUT s"""
        end = time.monotonic() + timeout
        while True:
            try:
                d = self.s.recv(65536)
            except BlockingIOError:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                select.select([self.s], [], [], left)
                continue
            h = (d[0] & 15) * 4
            if d[12:16] != self.src or d[h + 2:h + 4] != b"\x12\xb7" or len(d) < h + 24:
                continue
            bth = d[h + 8:h + 20]
            if int.from_bytes(bth[5:8], "big") != self.dqpn:
                continue
            self.raw.append(d)
            k = (int.from_bytes(bth[9:12], "big") - self.first) & 0xffffff
            return k, bth[0], bth[8] >> 7, d[h + 20:len(d) - 4 - ((bth[1] >> 4) & 3)]


def check_icrc(raw, what):
    """each of the datagrams RAW as Wire.responses checks them (one failure
    per kind, with the first few PSNs)"""
    bad = {}
    for d in raw:
        p = IP(d)
        b = p[BTH]
        if struct.pack("!I", b.icrc) != b.compute_icrc(None):
            bad.setdefault("an ICRC scapy does not compute", []).append(b.psn)
        if not p[IP].flags.DF:  # (the identification: as in Wire.responses)
            bad.setdefault(f"IP id {p[IP].id}, flags {p[IP].flags}", []).append(b.psn)
        if p[IP].tos & 3 != 2:
            bad.setdefault(f"IP ECN {p[IP].tos & 3:#04b}, not ECT(0)", []).append(b.psn)
    for k, psns in bad.items():
        fail(f"{what}: {len(psns)} of {len(raw)} requests with {k} (PSN "
             f"{', '.join(hex(x) for x in psns[:4])}{', ...' if len(psns) > 4 else ''})")


class Responder:
    """Scapy as an RC responder for one WRITE of NPK packets: the packets in
    order kept (GOT, by PSN - first), an ACK of each AckReq (MSN 1 at the
    last), a duplicate's AckReq ACKed again, a PSN ahead NAKed once."""

    def __init__(self, answer, got, expected, npk):
        self.answer, self.got, self.expected, self.npk = answer, got, expected, npk
        self.naked = False

    def take(self, r):
        k, ackreq = r[0], r[2]
        if k == self.expected:
            self.got[k] = r
            self.expected += 1
            self.naked = False
            if ackreq or self.expected == self.npk:
                self.answer(k, 0x1f, int(self.expected == self.npk))
        elif k < self.expected:
            if ackreq:
                self.answer(self.expected - 1, 0x1f)
        elif not self.naked:
            self.answer(self.expected, 0x60)
            self.naked = True


def nak_midway(agent, tool, w):
    npk = GB_LEN // MTU
    pattern = random.Random(0x1902b03).randbytes(GB_LEN)
    for o in range(0, GB_LEN, 16384):  # the agent reads lines of up to 64 KiB
        agent.poke(GB_OFF + o, pattern[o:o + 16384])
    cap = ReqCapture()
    outcomes = []
    for attempt in range(3):
        t_try = time.monotonic()
        idx, qpn = agent.qp("rc")
        fake = GB_QPN + attempt
        agent.cmd(f"connect {idx} {fake:#x} 0 ::ffff:{B_IP} {GB_PSN:#x} {MTU}")
        counters = Counters(tool, agent.p.pid, qpn)
        before = counters.get()
        what = f"11 (try {attempt + 1}, QP {qpn:#x})"
        built = {}

        def answer(k, syn, msn=0, send=True):
            """an ACK / NAK of PSN first+K to the agent's QP, as scapy builds
            it (ICRC and all); the same bytes again come from a cache"""
            key = (k, syn, msn)
            if key not in built:
                built[key] = w.build(0x11, GB_PSN + k, ext=struct.pack("!I", syn << 24 | msn),
                                     dqpn=qpn, ackreq=0)
            if send:
                w.tx.sendto(built[key], (A_IP, 4791))

        # build now what scapy will send soon (the NAK, ACKs of the AckReqs)
        for k in range(GB_NAK_AT, npk):
            if not (GB_PSN + k + 1) & 15 or k == npk - 1:
                answer(k, 0x1f, int(k == npk - 1), send=False)
        answer(GB_NAK_AT, 0x60, send=False)
        cap.start(fake, GB_PSN)
        wrid = 0x1100 + attempt
        agent.cmd(f"post {idx} write off={GB_OFF} len={GB_LEN} raddr={GB_RADDR:#x} "
                  f"rkey={GB_RKEY:#x} wrid={wrid}")
        # the first window: 20 packets in order, then the NAK
        first = []
        while len(first) < GB_REACT:
            r = cap.get(1.0)
            if r is None:
                break
            first.append(r)
        if [r[0] for r in first] != list(range(GB_REACT)):
            outcomes.append(f"the first window came as PSNs +{[r[0] for r in first]}")
            continue  # this QP is left as it is: the next try's remote QPN is another
        answer(GB_NAK_AT, 0x60)  # NAK PSN sequence error, MSN 0
        hi, g1, seen = GB_REACT - 1, None, []
        # the rest of the first window, then the first PSN again or lower
        while g1 is None:
            r = cap.get(0.5)
            if r is None:
                break
            if r[0] > hi:  # (over a veth they come in order)
                hi = r[0]
                continue
            g1 = r[0]
            seen.append(r)
        if g1 is None:
            outcomes.append(f"nothing sent again within 0.5 s of the NAK (first window up "
                            f"to +{hi})")
            continue
        # The NAK acknowledged first..first+9, and a loss halves the window
        # (engine/congestion.c): from +10 the agent goes on to
        # +10 + (hi + 1) / 2 - 1, no further, before scapy ACKs anything
        want_top = GB_NAK_AT + (hi + 1) // 2 - 1
        top = g1
        end = time.monotonic() + 0.2
        while g1 == GB_NAK_AT and top < want_top and time.monotonic() < end:
            r = cap.get(end - time.monotonic())
            if r:
                seen.append(r)
                top = max(top, r[0])
        r = cap.get(0.002)
        while r:
            seen.append(r)
            top = max(top, r[0])
            r = cap.get(0.002)
        # The counters now, with the agent stopped: no probe can come while
        # `softverbs stat` reads them, nor before the engine has read the
        # ACKs scapy sends meanwhile (it takes in packets before it fires
        # timers), so that scapy's slowness here costs no probe later
        os.kill(agent.p.pid, signal.SIGSTOP)
        try:
            now = counters.get()
            while True:
                r = cap.get(0)
                if not r:
                    break
                seen.append(r)
                top = max(top, r[0])
            deltas = {c: now.get(c, 0) - before.get(c, 0)
                      for c in ("retransmit_probes", "ack_timeouts")}
            ok = g1 == GB_NAK_AT and deltas["retransmit_probes"] == 0 and \
                deltas["ack_timeouts"] == 0 and top == want_top
            outcomes.append(f"first window +0..+{hi}, NAK +{GB_NAK_AT}: sent again from "
                            f"+{g1}, retransmit_probes +{deltas['retransmit_probes']}, "
                            f"ack_timeouts +{deltas['ack_timeouts']}; before any ACK up to "
                            f"+{top}")
            # Now the responder to the end: in order packets kept, an ACK for
            # each AckReq (MSN 1 at the last), a duplicate's AckReq ACKed
            # again, a PSN ahead NAKed once
            resp = Responder(answer, {r[0]: r for r in first[:GB_NAK_AT]}, GB_NAK_AT, npk)
            for r in seen:
                resp.take(r)
        finally:
            os.kill(agent.p.pid, signal.SIGCONT)
        stalled = False
        end = time.monotonic() + 3.0
        while resp.expected < npk:
            r = cap.get(end - time.monotonic())
            if r is None:
                stalled = True
                break
            resp.take(r)
        got, expected = resp.got, resp.expected
        if stalled:
            fail(f"{what}: the WRITE stalled at +{expected} of {npk} (scapy ACKing in order)")
            return
        # what scapy has: WRITE FIRST (the RETH), MIDDLEs, LAST, the bytes
        ops = [got[k][1] for k in range(npk)]
        want = [0x06] + [0x07] * (npk - 2) + [0x08]
        if ops != want:
            bad = [(k, hex(o)) for k, o in enumerate(ops) if o != want[k]]
            fail(f"{what}: opcodes by PSN (+k, opcode) {bad[:8]}, expected WRITE FIRST, "
                 f"MIDDLE.., LAST (the resent +{GB_NAK_AT} a MIDDLE)")
        reth_got = got[0][3][:16]
        if reth_got != reth(GB_RADDR, GB_RKEY, GB_LEN):
            fail(f"{what}: RETH {reth_got.hex()}, expected {reth(GB_RADDR, GB_RKEY, GB_LEN).hex()}")
        data_got = got[0][3][16:] + b"".join(got[k][3] for k in range(1, npk))
        if data_got != pattern:
            diff = next((i for i in range(min(len(data_got), GB_LEN))
                         if data_got[i] != pattern[i]), None)
            fail(f"{what}: {len(data_got)} bytes reassembled by PSN, first difference from "
                 f"the agent's buffer at {diff}")
        wcs = []
        for _ in range(3):  # a leftover try's completion may come first
            wcs += agent.poll(1, 2000)
            if any(int(c["wrid"]) == wrid for c in wcs):
                break
        mine = [c for c in wcs if int(c["wrid"]) == wrid]
        if len(mine) != 1 or mine[0]["status"] != "0" or mine[0]["opcode"] != "1":
            fail(f"{what}: completions {wcs}, expected wrid {wrid} RDMA_WRITE (1) status 0")
        check_icrc(cap.raw, what)
        after = counters.get()
        log(f"11 try {attempt + 1}: {outcomes[-1]}; done in "
            f"{time.monotonic() - t_try:.2f} s, {len(cap.raw)} packets, retransmits "
            f"+{after['retransmits'] - before['retransmits']}, retransmit_probes "
            f"+{after.get('retransmit_probes', 0) - before.get('retransmit_probes', 0)}")
        if ok:
            break
    else:
        fail(f"11 NAK (0x60) inside a WRITE the window stopped midway (PSN +k from "
             f"{GB_PSN:#x}): in no try was the first packet sent again +{GB_NAK_AT} with no "
             f"probe or ack timeout first, and the window, halved, moved by the {GB_NAK_AT} "
             "packets the NAK acknowledged: " +
             "; ".join(f"try {i + 1}: {o}" for i, o in enumerate(outcomes)))
        return
    log(f"11 NAK 0x60 at PSN +{GB_NAK_AT} inside a 256-packet WRITE stopped by the window: "
        f"sent again from exactly +{GB_NAK_AT} at once (no probe, no ack timeout), the "
        f"window halved and moved by {GB_NAK_AT}; scapy as the responder: written in order, bytes "
        f"right, completed (try {len(outcomes)})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    try:
        main()
    except AgentError as e:
        fail(str(e))
    finally:
        cleanup()
    print(f"{'PASS' if not fails else f'{len(fails)} failure(s)'} "
          f"({time.monotonic() - t0:.1f} s)")
    sys.exit(1 if fails else 0)
