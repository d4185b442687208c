#!/usr/bin/python3
"""Parts of transport_rocev2_capture (rocev2_capture.sh) in Python.

  rocev2_pcap.py drive AGENT NS_A DEV_A NS_B DEV_B MTU QPNS_OUT LOG
      Two rocev2_agent processes, A (responder) in NS_A and B (requester) in
      NS_B, with an RC, a UC and a UD QP each.  B posts, over RC: SEND,
      SEND with immediate, RDMA WRITE, WRITE with immediate (each of 100
      bytes, one packet, and of 3000, three at MTU 1024), READ (100, 3000),
      compare-and-swap, fetch-and-add; over UC the SENDs and WRITEs; over
      UD a SEND and a SEND with immediate.  Every completion must be there
      with its status, length, immediate, and every byte where it belongs.
      The QPNs go to QPNS_OUT (one per line).

  rocev2_pcap.py check PCAP MTU QPNS_FILE SEGMENTS EXPECTED_OPCODES [PROGRAM_OUTPUT...]
      SEGMENTS: lines "UNIX_TIME NAME", when each program started (programs
      in separate namespaces' runs reuse QPNs: a flow is one program's).
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
        - the ICRC on the packet is the one scapy computes;
        - PSNs: per requester flow (source, destination, destination QPN; UD:
          source and DETH source QP) each request takes the PSN after the
          one before it (a READ request as many as its responses), never
          one ahead; READ responses count up from their request's PSN; each
          flow keeps one UDP source port;
      then tshark (its InfiniBand dissector on UDP 4791) must decode every
      frame with a BTH opcode equal to scapy's, report nothing malformed and
      no expert entry of severity error; and the opcodes seen must be the
      expected set, each at least once.  Prints the count per opcode.
"""
import bisect
import collections
import os
import random
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rocev2_lib import Agent, AgentError, OPCODES  # noqa: E402

try:
    from scapy.layers.l2 import Ether  # noqa: F401 (pcap link type 1)
    from scapy.layers.inet import IP, UDP
    from scapy.utils import rdpcap
    from scapy.contrib.roce import BTH
except ImportError:
    print("SKIP: python3-scapy (scapy.contrib.roce) not installed")
    sys.exit(77)

fails = []


def fail(msg):
    fails.append(msg)
    if len(fails) <= 40:
        print("FAIL:", msg)


# --------------------------------------------------------------- drive ----
def drive(agent, ns_a, dev_a, ns_b, dev_b, mtu, qpns_out, logpath):
    log = open(logpath, "ab")
    a = Agent(agent, ns_a, dev_a, log)
    b = Agent(agent, ns_b, dev_b, log)
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


def check(pcap, mtu, qpns_file, segments, expected, outputs):
    mtu = int(mtu)
    seg_t, seg_name = [], []
    for line in open(segments):
        t, name = line.split(None, 1)
        seg_t.append(float(t))
        seg_name.append(name.strip())
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
        op = b.opcode
        scapy_ops.append(op)
        counts[op] += 1
        seg = max(bisect.bisect_right(seg_t, float(p.time)) - 1, 0)
        where = (f"frame {i} [{seg_name[seg] if seg_name else '-'}] "
                 f"({ip.src}:{udp.sport}->{ip.dst} op {op:#04x} qpn {b.dqpn:#x} psn {b.psn:#x})")
        if op not in OPCODES or op not in expected:
            fail(f"{where}: opcode not expected")
            continue
        name, ext, role, pos = OPCODES[op]
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
        if op in (0x0c, 0x11, 0x12, 0x13, 0x14) and plen:
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
        # flows and PSNs
        if op >= 0x60:
            sqp = struct.unpack("!I", body[4:8])[0] & 0xffffff
            if sqp not in qpns:
                fail(f"{where}: DETH source QP {sqp:#x} not one in use")
            flow = (seg, ip.src, "ud", sqp)
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
            if syn >> 5 != 0:
                fail(f"{where}: AETH syndrome {syn:#04x} (not an ACK) on a clean link")
    print(f"scapy: {len(pkts)} packets, {len(req_next)} requester flows, "
          f"{retrans} retransmitted requests")
    for op in sorted(counts):
        print(f"  {op:#04x} {OPCODES.get(op, ('?',))[0]:<36} {counts[op]}")
    for op in sorted(expected - set(counts)):
        fail(f"no packet with opcode {op:#04x} ({OPCODES[op][0]})")

    # tshark: every frame a BTH whose fields are scapy's, with the headers
    # after it that IBA gives its opcode (and their values where scapy read them)
    fields = ["frame.number", "infiniband.bth.opcode", "_ws.col.Protocol",
              "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.padcnt",
              "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.immdt",
              "infiniband.deth.srcqp", "infiniband.atomiceth.cmpdt",
              "infiniband.atomicacketh.origremdt"]
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
    if set(tcounts) != expected:
        fail(f"tshark: opcodes seen {sorted(hex(o) for o in tcounts)}, expected "
             f"{sorted(hex(o) for o in expected)}")
    r = subprocess.run(["tshark", "-n", "-r", pcap, "-Y",
                        "_ws.malformed || _ws.expert.severity >= error"],
                       capture_output=True, text=True)
    if r.stdout.strip():
        fail("tshark: malformed frames or expert errors:\n" + r.stdout[:3000])
    r = subprocess.run(["tshark", "-n", "-q", "-r", pcap, "-z", "expert"],
                       capture_output=True, text=True)
    print("tshark: " + (r.stdout.strip().replace("\n", "\n  ") or "no expert info"))
    print(f"tshark: {len(rows)} frames, {sum(tcounts.values())} with a BTH, "
          f"{len(tcounts)} opcodes")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "drive" and len(sys.argv) == 10:
        try:
            drive(*sys.argv[2:])
        except AgentError as e:
            fail(str(e))
    elif len(sys.argv) >= 7 and sys.argv[1] == "check":
        check(*sys.argv[2:7], sys.argv[7:])
    else:
        print(__doc__)
        sys.exit(2)
    if fails:
        print(f"{len(fails)} failure(s)")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
