#!/usr/bin/python3
"""Parts of transport_rocev2_capture (rocev2_capture.sh) in Python.

  rocev2_pcap.py drive AGENT NS_A DEV_A NS_B DEV_B MTU QPNS_OUT LOG [FAULTS_B]
      Two rocev2_agent processes, A (responder) in NS_A and B (requester) in
      NS_B, with an RC, a UC and a UD QP each.  B posts, over RC: SEND,
      SEND with immediate, RDMA WRITE, WRITE with immediate (each of 100
      bytes, one packet, and of 3000, three at MTU 1024), READ (100, 3000),
      compare-and-swap, fetch-and-add; over UC the SENDs and WRITEs; over
      UD a SEND and a SEND with immediate.  Every completion must be there
      with its status, length, immediate, and every byte where it belongs.
      The QPNs go to QPNS_OUT (one per line).  FAULTS_B: B runs with
      SOFTVERBS_FAULTS=FAULTS_B and SOFTVERBS_LOG=info (its injection report
      goes to LOG).

  rocev2_pcap.py check PCAP MTU QPNS_FILE SEGMENTS EXPECTED_OPCODES [PROGRAM_OUTPUT...]
      SEGMENTS: lines "UNIX_TIME NAME", when each program started (programs
      in separate namespaces' runs reuse QPNs: a flow is one program's), and
      lines "expect NAME ce=N" / "expect NAME corrupt=N": segment NAME ran
      under SOFTVERBS_FAULTS and its programs report N packets injected so.
      Every captured packet (UDP port 4791) through scapy's RoCE layer:
        - scapy finds a BTH; version 0, P_Key 0xffff, the IP header has DF;
        - the opcode is one of EXPECTED_OPCODES (comma-separated hex) and of
          the QP type of its range;
        - its destination QPN (and a UD packet's DETH source QP) is one of
          the QPNs in use (QPNS_FILE, and "QPN 0x.." in each PROGRAM_OUTPUT);
        - the headers after the BTH, the payload and the pad add up: pad
          bytes are zero, payload + pad a multiple of 4, a FIRST/MIDDLE
          payload exactly the path MTU, a LAST one 1..MTU, an ONLY one at
          most the MTU (an RDMA WRITE ONLY's the RETH's DMA length), a READ
          request, ACK or atomic none;
        - the ICRC on the packet is the one scapy computes; in a segment
          with "corrupt=N" exactly N packets have another, and for each one
          bit flipped (not in the masked BTH byte 4) makes it right: the
          packet so repaired goes through every check here (tshark's are
          left out for it: it decodes the corrupted bytes);
        - IP ECN: ECT(0) on every packet, but in a segment with "ce=N" on
          exactly N requests, which carry CE; in such a segment a NAK (PSN
          sequence error) is no fault if it also has "corrupt";
        - a CNP (0x81): BTH byte 4 0x40 (BECN), PSN 0, no pad, no AckReq,
          16 zero reserved bytes; in a "ce" segment at least one, at most
          as many as CE-marked requests, each after a CE-marked request the
          other way; one to a UD QP (a DETH source QP there) only after a
          CE-marked datagram from that QP;
        - PSNs: per requester flow (source, destination, destination QPN; UD:
          source and DETH source QP) each request takes the PSN after the
          one before it (a READ request as many as its responses), never
          one ahead; READ responses count up from their request's PSN; each
          flow keeps one UDP source port;
      then tshark (its InfiniBand dissector on UDP 4791) must decode every
      frame with a BTH opcode equal to scapy's and the same IP ECN, report
      nothing malformed and no expert entry of severity error; a CNP it
      names CNP or (Wireshark 4.0 knows no opcode 0x81) shows as opcode 129
      with the reserved byte 0x40 and, as unknown data, the 16 zero bytes
      and the ICRC; and the opcodes seen must be the expected set, each at
      least once.  Prints the count per opcode.
"""
import bisect
import collections
import os
import random
import re
import struct
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rocev2_lib import Agent, AgentError, OPCODES  # noqa: E402

try:
    from scapy.layers.l2 import Ether  # noqa: F401 (pcap link type 1)
    from scapy.layers.inet import IP, UDP
    from scapy.utils import rdpcap
    from scapy.contrib.roce import BTH
except ImportError:
    print("SKIP: scapy's RoCE layer (scapy.contrib.roce) not found: install Debian package "
          "python3-scapy (apt-get install python3-scapy; scripts/install-deps.sh --all "
          "installs every package the tests use)")
    sys.exit(77)

fails = []


def fail(msg):
    fails.append(msg)
    if len(fails) <= 40:
        print("FAIL:", msg)


# --------------------------------------------------------------- drive ----
def drive(agent, ns_a, dev_a, ns_b, dev_b, mtu, qpns_out, logpath, faults_b=""):
    log = open(logpath, "ab")
    a = Agent(agent, ns_a, dev_a, log)
    b = Agent(agent, ns_b, dev_b, log,
              env=dict(SOFTVERBS_FAULTS=faults_b, SOFTVERBS_LOG="info") if faults_b else None)
    try:
        _drive(a, b, int(mtu), qpns_out)
    finally:
        ra, rb = a.close(), b.close()
    if ra or rb:
        fail(f"agents exited {ra}, {rb}")


def _drive(a, b, mtu, qpns_out):
    rnd = random.Random(4791)
    ia, ib = a.info(), b.info()
    qp = {}
    for kind in ("rc", "uc", "ud"):
        qp[kind] = (a.qp(kind), b.qp(kind))
    with open(qpns_out, "w") as f:
        for kind, ((_, qa), (_, qb)) in qp.items():
            f.write(f"{qa:#x} {kind} A\n{qb:#x} {kind} B\n")
    for kind in ("rc", "uc"):
        (xa, qa), (xb, qb) = qp[kind]
        a.cmd(f"connect {xa} {qb} 0x123456 {ib['gid']} 0x654321 {mtu}")
        b.cmd(f"connect {xb} {qa} 0x654321 {ia['gid']} 0x123456 {mtu}")
    raddr, rkey = int(ia["addr"], 16), ia["rkey"]
    slot = [0]

    def src(n):
        """n random bytes at B's next source slot; their offset."""
        off = slot[0] * 4096
        slot[0] += 1
        data = bytes(rnd.randrange(256) for _ in range(n))
        b.poke(off, data)
        return off, data

    def one(kind, op, n, imm=None, recv=False, write=False):
        """B posts OP of n bytes on its KIND QP; A receives (recv) and/or
        is written (write).  Checks both sides' completions and A's bytes."""
        xa, qa = qp[kind][0]
        xb, _ = qp[kind][1]
        off, data = src(n)
        rslot = 0x10000 + slot[0] * 4096
        woff = 0x40000 + slot[0] * 4096
        grh = 40 if kind == "ud" else 0
        if recv:
            a.cmd(f"recv {xa} {rslot} {4096} {slot[0]}")
        args = f"off={off} len={n} wrid={slot[0]}"
        if imm is not None:
            args += f" imm={imm:#x}"
        if write:
            args += f" raddr={raddr + woff} rkey={rkey}"
        if kind == "ud":
            args += f" ah={ia['gid']} dqpn={qa}"
        b.cmd(f"post {xb} {op} {args}")
        wc = b.poll(1)
        what = f"{kind} {op} {n} B"
        if len(wc) != 1 or wc[0]["status"] != "0":
            fail(f"{what}: requester completion {wc}")
        if recv:
            wc = a.poll(1)
            if len(wc) != 1 or wc[0]["status"] != "0":
                fail(f"{what}: receive completion {wc}")
            else:
                want_len = n + grh if op.startswith("send") else n
                if int(wc[0]["len"]) != want_len:
                    fail(f"{what}: receive completion of {wc[0]['len']} bytes, "
                         f"expected {want_len}")
                if imm is not None and int(wc[0]["imm"], 16) != imm:
                    fail(f"{what}: immediate {wc[0]['imm']}, expected {imm:#x}")
                if op.startswith("send") and a.peek(rslot + grh, n) != data:
                    fail(f"{what}: received bytes differ")
        if write and not recv and kind == "uc":
            # a UC WRITE without immediate completes when it leaves B: A
            # may not have taken its packets in yet (a loaded host)
            deadline = time.monotonic() + 5
            while a.peek(woff, n) != data and time.monotonic() < deadline:
                time.sleep(0.01)
        if write and a.peek(woff, n) != data:
            fail(f"{what}: written bytes differ")

    for kind in ("rc", "uc"):
        for n in (100, 3000):
            one(kind, "send", n, recv=True)
            one(kind, "send_imm", n, imm=0x1000 + n, recv=True)
            one(kind, "write", n, write=True)
            one(kind, "write_imm", n, imm=0x2000 + n, recv=True, write=True)
    one("ud", "send", 100, recv=True)
    one("ud", "send_imm", 100, imm=0x3064, recv=True)

    # RC READ and atomics: A's memory is the remote side
    xb = qp["rc"][1][0]
    for n in (100, 3000):
        data = bytes(rnd.randrange(256) for _ in range(n))
        a.poke(0x60000, data)
        dst = 0x30000 + n
        b.cmd(f"post {xb} read off={dst} len={n} wrid=9{n} raddr={raddr + 0x60000} rkey={rkey}")
        wc = b.poll(1)
        if len(wc) != 1 or wc[0]["status"] != "0" or int(wc[0]["len"]) != n:
            fail(f"rc read {n} B: completion {wc}")
        elif b.peek(dst, n) != data:
            fail(f"rc read {n} B: bytes read differ")
    a.poke(0x80000, struct.pack("<Q", 41))
    b.cmd(f"post {xb} cas off=0x38000 wrid=11 raddr={raddr + 0x80000} rkey={rkey} cmp=41 swap=1000")
    b.cmd(f"post {xb} faa off=0x38008 wrid=12 raddr={raddr + 0x80000} rkey={rkey} add=5")
    wc = b.poll(2)
    if len(wc) != 2 or any(w["status"] != "0" for w in wc):
        fail(f"rc atomics: completions {wc}")
    got = struct.unpack("<QQ", b.peek(0x38000, 16))
    mem = struct.unpack("<Q", a.peek(0x80000, 8))[0]
    if got != (41, 1000) or mem != 1005:
        fail(f"rc atomics: CAS/FAA returned {got}, memory {mem}; expected (41, 1000), 1005")
    print(f"agent: {slot[0]} operations on RC/UC/UD and READ/CAS/FAA done")


# --------------------------------------------------------------- check ----
def psn_diff(a, b):
    """a - b modulo 2^24, as a signed number."""
    d = (a - b) & 0xffffff
    return d - (1 << 24) if d >= (1 << 23) else d


def icrc_of(m):
    """The ICRC (4 bytes, as on the wire) of M: 8 bytes of 0xff and an IPv4
    datagram up to its ICRC, the fields IBA A17.8 masks already 0xff."""
    return struct.pack("<I", zlib.crc32(m) & 0xffffffff)


def masked(ipb):
    """IPv4 datagram IPB (ICRC at its end) as the ICRC sees it, less the ICRC;
    and the offset of its UDP payload (the BTH) in that."""
    ihl = (ipb[0] & 15) * 4
    m = bytearray(b"\xff" * 8 + ipb[:-4])
    m[8 + 1] = 0xff                          # TOS
    m[8 + 8] = 0xff                          # TTL
    m[8 + 10:8 + 12] = b"\xff\xff"           # header checksum
    m[8 + ihl + 6:8 + ihl + 8] = b"\xff\xff"  # UDP checksum
    m[8 + ihl + 8 + 4] = 0xff                # BTH FECN, BECN, reserved
    return m, 8 + ihl + 8


def repair(ipb):
    """IPB, whose ICRC is wrong, with the one bit flipped back that makes it
    right (SOFTVERBS_FAULTS corrupt: one bit of the UDP payload, not the
    ICRC, not BTH byte 4); (datagram, offset in the UDP payload, bit), or
    None when no one bit does."""
    m, bth = masked(ipb)
    want = ipb[-4:]
    for i in range(bth, len(m)):
        if i == bth + 4:
            continue
        for bit in range(8):
            m[i] ^= 1 << bit
            if icrc_of(m) == want:
                fixed = bytearray(ipb)
                fixed[i - 8] ^= 1 << bit
                return bytes(fixed), i - bth, bit
            m[i] ^= 1 << bit
    return None


def read_segments(segments):
    """SEGMENTS' lines "UNIX_TIME NAME" and "expect NAME KEY=N": the start
    times, the names (in that order), and {name: {KEY: N}}."""
    seg_t, seg_name = [], []
    expect = collections.defaultdict(dict)  # segment name -> {"ce": N, "corrupt": N}
    for line in open(segments):
        t, name = line.split(None, 1)
        if t == "expect":
            name, kv = name.split()
            k, v = kv.split("=")
            expect[name][k] = int(v)
            continue
        seg_t.append(float(t))
        seg_name.append(name.strip())
    return seg_t, seg_name, expect


def segment_of(p, seg_t, seg_name):
    """The segment packet P was captured in: its index, its name."""
    seg = max(bisect.bisect_right(seg_t, float(p.time)) - 1, 0)
    return seg, seg_name[seg] if seg_name else "-"


def tshark_bad(pcap):
    """tshark's lines "FRAME INFO" for the frames it finds malformed or
    with an expert entry of severity error."""
    r = subprocess.run(["tshark", "-n", "-r", pcap, "-Y",
                        "_ws.malformed || _ws.expert.severity >= error",
                        "-T", "fields", "-e", "frame.number", "-e", "_ws.col.Info"],
                       capture_output=True, text=True)
    return [l for l in r.stdout.splitlines() if l.strip()]


def opcode_report(counts, expected):
    """Print the packets per opcode (COUNTS); each one EXPECTED must be seen."""
    for op in sorted(counts):
        print(f"  {op:#04x} {OPCODES.get(op, ('?',))[0]:<36} {counts[op]}")
    for op in sorted(expected - set(counts)):
        fail(f"no packet with opcode {op:#04x} ({OPCODES[op][0]})")


def expected_segments(expect, seg_name):
    """(name, index, {KEY: N}) of each segment with "expect" lines; a
    failure for one that never started."""
    for name, faults in expect.items():
        if name not in seg_name:
            fail(f"segment {name}: expected, not in the segments")
            continue
        yield name, seg_name.index(name), faults


def check_ce(name, marked, cnps, injected, what="requests"):
    """Segment NAME under SOFTVERBS_FAULTS ce: MARKED packets with IP ECN CE
    on the wire, as many as the programs say they marked (INJECTED), at
    least one; CNPS CNPs answered them, at least one, at most one each."""
    if marked != injected or not marked:
        fail(f"segment {name}: {marked} packets with IP ECN CE, the programs "
             f"marked {injected}")
    if not 1 <= cnps <= marked:
        fail(f"segment {name}: {cnps} CNPs for {marked} CE-marked "
             f"{what} (expected at least one, at most one each)")


def finish():
    """Exit 1 after the failures, if any; else say PASS."""
    if fails:
        print(f"{len(fails)} failure(s)")
        sys.exit(1)
    print("PASS")


def check(pcap, mtu, qpns_file, segments, expected, outputs):
    mtu = int(mtu)
    seg_t, seg_name, expect = read_segments(segments)
    expected = {int(x, 16) for x in expected.split(",")}
    qpns = set()
    for line in open(qpns_file):
        if line.strip():
            qpns.add(int(line.split()[0], 16))
    for f in outputs:
        for m in re.finditer(r"QPN:? *(0x[0-9a-fA-F]+|[0-9]+)", open(f, errors="replace").read()):
            qpns.add(int(m.group(1), 0))
    print(f"QPNs in use: {' '.join(hex(q) for q in sorted(qpns))}")

    pkts = rdpcap(pcap)
    counts = collections.Counter()
    scapy_ops = []
    req_next = {}      # requester flow -> next PSN expected
    resp_next = {}     # response flow -> next READ response PSN
    sports = {}        # flow -> UDP source port
    retrans = 0
    reads = {}         # (requester ip, responder ip) -> {psn: packets}
    corrupted = collections.Counter()  # segment -> packets with one bit flipped
    corrupt_frames = set()             # their frame numbers (tshark reads them as they are)
    ce_marked = collections.Counter()  # segment -> requests with IP ECN CE
    ce_rcuc = collections.Counter()    # (segment, from, to) -> CE-marked RC/UC requests
    ce_any = collections.Counter()     # (segment, from, to) -> CE-marked requests, UD too
    ce_ud_src = collections.defaultdict(set)  # segment -> UD source QPs of CE-marked datagrams
    cnps = collections.Counter()       # segment -> CNPs
    cnp_qpns = collections.defaultdict(set)  # segment -> their destination QPNs
    ud_qpns = collections.defaultdict(set)   # segment -> UD source QPs (DETH)
    naks = collections.Counter()       # segment -> PSN sequence error NAKs
    resent = collections.Counter()     # segment -> requests sent again
    for i, p in enumerate(pkts, 1):
        if IP not in p or UDP not in p:
            fail(f"frame {i}: not IPv4/UDP")
            scapy_ops.append(None)
            continue
        ip, udp = p[IP], p[UDP]
        if udp.dport != 4791 or BTH not in p:
            fail(f"frame {i}: UDP {udp.sport}->{udp.dport}, scapy found no BTH")
            scapy_ops.append(None)
            continue
        b = p[BTH]
        seg, sname = segment_of(p, seg_t, seg_name)
        faults = expect.get(sname, {})
        if "corrupt" in faults and struct.pack("!I", b.icrc) != b.compute_icrc(None):
            r = repair(bytes(ip))
            if not r:
                fail(f"frame {i} [{sname}] ({ip.src}:{udp.sport}->{ip.dst}): ICRC "
                     f"{b.icrc:#010x} wrong, and no one bit flipped makes it right")
                scapy_ops.append(None)
                continue
            corrupted[seg] += 1
            corrupt_frames.add(i)
            q = p.__class__(bytes(p)[:len(p) - len(ip)] + r[0])
            q.time = p.time
            p = q
            ip, udp, b = p[IP], p[UDP], p[BTH]
        op = b.opcode
        scapy_ops.append(op)
        counts[op] += 1
        where = (f"frame {i} [{sname}] "
                 f"({ip.src}:{udp.sport}->{ip.dst} op {op:#04x} qpn {b.dqpn:#x} psn {b.psn:#x})")
        if op not in OPCODES or op not in expected:
            fail(f"{where}: opcode not expected")
            continue
        name, ext, role, pos = OPCODES[op]
        ecn = ip.tos & 3
        if ecn == 3:
            if "ce" not in faults:
                fail(f"{where}: IP ECN CE in a segment without SOFTVERBS_FAULTS ce")
            elif role != "req":
                fail(f"{where}: IP ECN CE on a {role} (only requests are marked here)")
            ce_marked[seg] += 1
            ce_any[seg, ip.src, ip.dst] += 1
            if op < 0x40:
                ce_rcuc[seg, ip.src, ip.dst] += 1
            elif op >= 0x60 and op != 0x81:
                deth = bytes(b.payload)[:8]  # the DETH: Q_Key, source QP
                ce_ud_src[seg].add(struct.unpack("!I", deth[4:8])[0] & 0xffffff)
        elif ecn != 2:
            fail(f"{where}: IP ECN {ecn:#04b}, expected ECT(0) 0b10")
        if not ip.flags.DF:
            fail(f"{where}: IP header without DF")
        if b.version != 0 or b.pkey != 0xffff:
            fail(f"{where}: TVer {b.version}, P_Key {b.pkey:#x}")
        if b.dqpn not in qpns:
            fail(f"{where}: destination QPN not one in use")
        body = bytes(b.payload)  # headers after the BTH, payload, pad (no ICRC)
        if len(body) < ext:
            fail(f"{where}: {len(body)} bytes after the BTH, headers need {ext}")
            continue
        plen = len(body) - ext - b.padcount
        pad = body[len(body) - b.padcount:] if b.padcount else b""
        if (len(body) - ext) % 4 or plen < 0 or pad.strip(b"\0"):
            fail(f"{where}: payload+pad {len(body) - ext} bytes, pad count {b.padcount}, "
                 f"pad {pad.hex()}")
        if pos in ("first", "middle") and plen != mtu:
            fail(f"{where}: {name} carries {plen} bytes, path MTU {mtu}")
        elif pos == "last" and not 1 <= plen <= mtu:
            fail(f"{where}: {name} carries {plen} bytes (1..{mtu})")
        elif pos == "only" and plen > mtu:
            fail(f"{where}: {name} carries {plen} bytes > MTU {mtu}")
        if op in (0x0c, 0x11, 0x12, 0x13, 0x14, 0x81) and plen:
            fail(f"{where}: {name} with {plen} bytes of payload")
        if op in (0x0a, 0x2a, 0x0b, 0x2b):
            dmalen = struct.unpack("!I", body[12:16])[0]
            if dmalen != plen:
                fail(f"{where}: {name} RETH DMA length {dmalen}, payload {plen}")
        if op in (0x06, 0x26):
            dmalen = struct.unpack("!I", body[12:16])[0]
            if dmalen <= mtu:
                fail(f"{where}: {name} RETH DMA length {dmalen} fits one packet")
        if struct.pack("!I", b.icrc) != b.compute_icrc(None):
            fail(f"{where}: ICRC {b.icrc:#010x} on the packet, scapy computes "
                 f"{struct.unpack('!I', b.compute_icrc(None))[0]:#010x}")
        if op == 0x81:
            cnps[seg] += 1
            cnp_qpns[seg].add(b.dqpn)
            if (b.fecn, b.becn, b.resv6, b.psn, b.ackreq, b.solicited, b.migreq) != \
                    (0, 1, 0, 0, 0, 0, 0) or body[:16] != bytes(16):
                fail(f"{where}: CNP with FECN {b.fecn} BECN {b.becn} reserved {b.resv6:#x} "
                     f"AckReq {b.ackreq} SE {b.solicited} M {b.migreq}, "
                     f"reserved bytes {body.hex()}")
            if "ce" in faults and not ce_any[seg, ip.dst, ip.src]:
                fail(f"{where}: CNP before any CE-marked request {ip.dst} -> {ip.src}")
        # flows and PSNs
        if op >= 0x60 and op != 0x81:
            sqp = struct.unpack("!I", body[4:8])[0] & 0xffffff
            if sqp not in qpns:
                fail(f"{where}: DETH source QP {sqp:#x} not one in use")
            flow = (seg, ip.src, "ud", sqp)
            ud_qpns[seg].add(sqp)
        else:
            flow = (seg, ip.src, ip.dst, b.dqpn, role)
        if sports.setdefault(flow, udp.sport) != udp.sport:
            fail(f"{where}: UDP source port {udp.sport}, the flow's earlier packets "
                 f"{sports[flow]}")
        if role == "req":
            exp = req_next.get(flow)
            if exp is not None:
                d = psn_diff(b.psn, exp)
                if d > 0:
                    fail(f"{where}: PSN {d} ahead of the next expected {exp:#x}")
                elif d < 0:
                    retrans += 1
                    resent[seg] += 1
            n = 1
            if op == 0x0c:
                dmalen = struct.unpack("!I", body[12:16])[0]
                n = max(1, -(-dmalen // mtu))
                reads.setdefault((seg, ip.src, ip.dst), {})[b.psn] = n
            if exp is None or psn_diff(b.psn, exp) >= 0:
                req_next[flow] = (b.psn + n) & 0xffffff
        elif op in (0x0d, 0x0e, 0x0f, 0x10):
            if op in (0x0d, 0x10):
                if b.psn not in reads.get((seg, ip.dst, ip.src), {}):
                    fail(f"{where}: READ response to no READ request with that PSN")
            else:
                exp = resp_next.get(flow)
                if exp is None or b.psn != exp:
                    fail(f"{where}: READ response PSN, expected {exp}")
            resp_next[flow] = (b.psn + 1) & 0xffffff
        elif op in (0x11, 0x12):
            syn = body[0]
            if syn == 0x60 and "corrupt" in faults:
                naks[seg] += 1  # the packet before was corrupted, dropped
            elif syn >> 5 != 0:
                fail(f"{where}: AETH syndrome {syn:#04x} (not an ACK) on a clean link")
    print(f"scapy: {len(pkts)} packets, {len(req_next)} requester flows, "
          f"{retrans} retransmitted requests"
          + "".join(f"; {n} in {seg_name[g]}" for g, n in sorted(resent.items()) if seg_name))
    opcode_report(counts, expected)
    # what the segments under SOFTVERBS_FAULTS show
    for name, seg, faults in expected_segments(expect, seg_name):
        rcuc = sum(n for (s, _, _), n in ce_rcuc.items() if s == seg)
        print(f"segment {name}: {ce_marked[seg]} CE-marked requests ({rcuc} RC/UC, "
              f"{ce_marked[seg] - rcuc} UD), "
              f"{cnps[seg]} CNPs, {corrupted[seg]} corrupted packets, {naks[seg]} NAKs "
              f"(PSN sequence); injected {faults}")
        if "ce" in faults:
            check_ce(name, ce_marked[seg], cnps[seg], faults["ce"])
            stray = (cnp_qpns[seg] & ud_qpns[seg]) - ce_ud_src[seg]
            if stray:
                fail(f"segment {name}: CNPs to UD QPs none of whose datagrams was marked "
                     f"{sorted(hex(q) for q in stray)}")
        if "corrupt" in faults and (corrupted[seg] != faults["corrupt"] or not corrupted[seg]):
            fail(f"segment {name}: {corrupted[seg]} packets with one bit flipped, the programs "
                 f"corrupted {faults['corrupt']}")
    for seg in cnps:
        sname = seg_name[seg] if seg_name else "-"
        if "ce" not in expect.get(sname, {}):
            print(f"segment {sname}: {cnps[seg]} CNPs without CE on the wire (the "
                  "receiver's own marks when its socket fills)")

    # tshark: every frame a BTH whose fields are scapy's, with the headers
    # after it that IBA gives its opcode (and their values where scapy read them)
    fields = ["frame.number", "infiniband.bth.opcode", "_ws.col.Protocol",
              "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
              "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.immdt",
              "infiniband.deth.srcqp", "infiniband.atomiceth.cmpdt",
              "infiniband.atomicacketh.origremdt", "ip.dsfield.ecn"]
    argv = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=;",
            "-E", "occurrence=f"]
    for f in fields:
        argv += ["-e", f]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        fail(f"tshark exited {r.returncode}: {r.stderr.strip()}")
    rows = [l.split(";") for l in r.stdout.splitlines() if l.strip()]
    if len(rows) != len(pkts):
        fail(f"tshark read {len(rows)} frames, scapy {len(pkts)}")
    has = {  # field index -> opcodes that carry that header
        6: {0x06, 0x0a, 0x0b, 0x0c, 0x26, 0x2a, 0x2b},
        7: {0x0d, 0x0f, 0x10, 0x11, 0x12},
        8: {0x03, 0x05, 0x09, 0x0b, 0x23, 0x25, 0x29, 0x2b, 0x65},
        9: {0x64, 0x65},
        10: {0x13, 0x14},
        11: {0x12},
    }
    tcounts = collections.Counter()
    for row in rows:
        row += [""] * (len(fields) - len(row))
        num, op = int(row[0]), row[1]
        if num in corrupt_frames:
            continue  # tshark reads the flipped bit; scapy checked it repaired
        if not op:
            fail(f"tshark: frame {num} has no infiniband.bth.opcode ({row[2]})")
            continue
        op = int(op, 0)
        tcounts[op] += 1
        if num > len(pkts) or scapy_ops[num - 1] is None:
            continue
        b = pkts[num - 1][BTH]
        if scapy_ops[num - 1] != op:
            fail(f"tshark: frame {num} opcode {op:#x}, scapy {scapy_ops[num - 1]:#x}")
            continue
        for idx, val in ((3, b.dqpn), (4, b.psn), (5, b.padcount)):
            if not row[idx] or int(row[idx], 0) != val:
                fail(f"tshark: frame {num} {fields[idx]} '{row[idx]}', scapy {val:#x}")
        for idx, ops in has.items():
            if bool(row[idx]) != (op in ops):
                fail(f"tshark: frame {num} opcode {op:#x}: {fields[idx]} "
                     f"{'present' if row[idx] else 'absent'}")
        body = bytes(b.payload)
        if row[6] and int(row[6], 0) != struct.unpack("!I", body[12:16])[0]:
            fail(f"tshark: frame {num} RETH DMA length {row[6]}, scapy "
                 f"{struct.unpack('!I', body[12:16])[0]}")
        if row[9] and int(row[9], 0) != struct.unpack("!I", body[4:8])[0] & 0xffffff:
            fail(f"tshark: frame {num} DETH source QP {row[9]}")
        if not row[12] or int(row[12], 0) != pkts[num - 1][IP].tos & 3:
            fail(f"tshark: frame {num} IP ECN '{row[12]}', scapy "
                 f"{pkts[num - 1][IP].tos & 3}")
    # CNPs: Wireshark 4.0's InfiniBand dissector has no opcode 0x81 (it
    # says "Unknown (129)" and shows what follows the BTH as unknown data);
    # a later one may name it
    r = subprocess.run(["tshark", "-n", "-r", pcap, "-Y", "infiniband.bth.opcode == 129",
                        "-T", "fields", "-E", "separator=;", "-E", "occurrence=l",
                        "-e", "frame.number", "-e", "_ws.col.Info", "-e", "infiniband.reserved",
                        "-e", "infiniband.vendor"], capture_output=True, text=True)
    tcnp = 0
    for line in r.stdout.splitlines():
        num, info, rsvd, vendor = (line.split(";") + [""] * 4)[:4]
        num = int(num)
        if num in corrupt_frames:
            continue
        tcnp += 1
        b = pkts[num - 1][BTH]
        want = bytes(16) + struct.pack("!I", b.icrc)
        if "CNP" in info:
            continue
        if rsvd.lower() not in ("40", "0x40") or \
                bytes.fromhex(vendor.replace(":", "")) != want:
            fail(f"tshark: frame {num} (CNP, '{info.strip()}'): BTH byte 4 '{rsvd}', "
                 f"after the BTH '{vendor}', expected 40 and {want.hex()}")
    if tcnp != counts[0x81] - sum(1 for n in corrupt_frames if scapy_ops[n - 1] == 0x81):
        fail(f"tshark: {tcnp} frames with opcode 129, scapy {counts[0x81]} CNPs")
    if set(tcounts) != expected:
        fail(f"tshark: opcodes seen {sorted(hex(o) for o in tcounts)}, expected "
             f"{sorted(hex(o) for o in expected)}")
    bad = [l for l in tshark_bad(pcap) if int(l.split()[0]) not in corrupt_frames]
    if bad:
        fail("tshark: malformed frames or expert errors:\n" + "\n".join(bad)[:3000])
    r = subprocess.run(["tshark", "-n", "-q", "-r", pcap, "-z", "expert"],
                       capture_output=True, text=True)
    print("tshark: " + (r.stdout.strip().replace("\n", "\n  ") or "no expert info"))
    print(f"tshark: {len(rows)} frames, {sum(tcounts.values())} with a BTH, "
          f"{len(tcounts)} opcodes")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "drive" and len(sys.argv) in (10, 11):
        try:
            drive(*sys.argv[2:])
        except AgentError as e:
            fail(str(e))
    elif len(sys.argv) >= 7 and sys.argv[1] == "check":
        check(*sys.argv[2:7], sys.argv[7:])
    else:
        print(__doc__)
        sys.exit(2)
    finish()


if __name__ == "__main__":
    main()
