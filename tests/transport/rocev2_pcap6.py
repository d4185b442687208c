#!/usr/bin/python3
"""Parts of transport_rocev2_ipv6 (rocev2_ipv6.sh) in Python.

  rocev2_pcap6.py devinfo FILE IPV4 IPV6|-
      FILE is `ibv_devinfo -v -d DEV` of one device: GID[2]/[3] are
      ::ffff:IPV4 (RoCE v1 / v2), GID[0]/[1] fe80::, and GID[4]/[5] the
      interface's IPv6 address IPV6 (RoCE v1 / RoCE v2), or, with "-", not
      shown or all zeros (the interface has no IPv6 address but its
      link-local one).

  rocev2_pcap6.py gids LOCAL REMOTE FILE...
      Each FILE is what one pingpong (" local address: ... GID g") or
      perftest (" GID: 253:00:...", decimal bytes) printed: the first GID
      is LOCAL, the second REMOTE (IPv6 addresses).

  rocev2_pcap6.py check PCAP ADDR_A ADDR_B SEGMENTS EXPECTED_OPCODES
      SEGMENTS: lines "UNIX_TIME NAME", when each program started, and
      lines "expect NAME ce=N" (in segment NAME B sent N packets with
      SOFTVERBS_FAULTS ce, its report says) or "expect NAME refused=1"
      (A's SOFTVERBS_ROCEV2_PEERS does not admit B: A sends nothing).
      Every captured packet (tcpdump `udp port 4791`) through scapy:
        - IPv6 (an IPv4 packet to port 4791 is a failure), between ADDR_A
          and ADDR_B, UDP destination port 4791, next header UDP directly;
        - scapy finds a BTH; version 0, P_Key 0xffff; the opcode is one of
          EXPECTED_OPCODES (comma-separated hex), and as long as its
          headers;
        - the ICRC on the packet is the one computed here over the IPv6
          pseudo-header of IBA annex A17.8 (8 bytes of 0xff for the LRH;
          the IPv6 header with traffic class, flow label and hop limit
          all ones; UDP checksum all ones; BTH byte 4 all ones), which is
          what Linux rxe (rxe_icrc.c) and scapy since 2.6 do; scapy 2.5's
          compute_icrc() knows IPv4 only ("TODO support IPv6") and is used
          to check this code's conventions on an IPv4 packet (and, where
          it handles IPv6, on every packet too);
        - traffic class ECN ECT(0) (0b10) on every packet, but in a "ce"
          segment exactly N of B's packets carry CE (0b11), none of A's;
          there A answers with CNPs (0x81, BECN, 16 zero bytes): at least
          one, at most one per CE-marked packet, each after one;
        - in a "refused" segment at least one packet from B, none from A.
      Prints the count per opcode; each opcode expected must be seen.
      Where tshark is installed, its InfiniBand dissector must read every
      frame's opcode and ECN as scapy does, nothing malformed.
"""
import collections
import ipaddress
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rocev2_lib import OPCODES  # noqa: E402
# (exits 77, skipped, without scapy)
from rocev2_pcap import (check_ce, expected_segments, fail, finish,  # noqa: E402
                         opcode_report, read_segments, segment_of, tshark_bad)

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.utils import rdpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402
import scapy.error  # noqa: E402


def addr(s):
    return ipaddress.ip_address(s)


# ------------------------------------------------------------- devinfo ----
def devinfo(path, ip4, ip6):
    text = open(path, errors="replace").read()
    gids = {}
    for m in re.finditer(r"GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+),\s*(RoCE v[12])", text):
        gids[int(m.group(1))] = (addr(m.group(2)), m.group(3))
    for i, (a, t) in sorted(gids.items()):
        print(f"  GID[{i}] {a} {t}")
    want = {2: (addr("::ffff:" + ip4), "RoCE v1"), 3: (addr("::ffff:" + ip4), "RoCE v2")}
    if ip6 != "-":
        want[4] = (addr(ip6), "RoCE v1")
        want[5] = (addr(ip6), "RoCE v2")
    for i, w in want.items():
        if gids.get(i) != w:
            fail(f"{path}: GID[{i}] {gids.get(i)}, expected {w[0]}, {w[1]}")
    for i in (0, 1):
        if i not in gids or not gids[i][0] in ipaddress.ip_network("fe80::/64"):
            fail(f"{path}: GID[{i}] {gids.get(i)}, expected fe80::EUI-64")
    if ip6 == "-":
        for i in (4, 5):
            if i in gids and int(gids[i][0]) != 0:
                fail(f"{path}: GID[{i}] {gids[i][0]}: the interface has no IPv6 address "
                     "but its link-local one")
    for i in gids:
        if i > 5:
            fail(f"{path}: GID[{i}] shown; only entries 0-5 are filled")


# ---------------------------------------------------------------- gids ----
def gids(local, remote, paths):
    want = [addr(local), addr(remote)]
    for p in paths:
        got = []
        for line in open(p, errors="replace"):
            m = re.search(r"address:.*GID ([0-9a-fA-F:.]+)", line)
            if m:
                got.append(addr(m.group(1)))
                continue
            m = re.match(r"\s*GID: ((?:\d+:){15}\d+)\s*$", line)
            if m:  # perftest: 16 bytes in decimal
                got.append(ipaddress.IPv6Address(bytes(int(x) for x in m.group(1).split(":"))))
        if got[:2] != want:
            fail(f"{os.path.basename(p)}: GIDs printed {[str(g) for g in got]}, expected "
                 f"local {want[0]}, remote {want[1]}")
        else:
            print(f"  {os.path.basename(p)}: GID {got[0]} (local), {got[1]} (remote)")


# --------------------------------------------------------------- check ----
def icrc(pseudo):
    """The ICRC, as its 4 bytes go on the wire, of PSEUDO: an IP datagram up to
    its ICRC, the fields IBA A17.8 masks already all ones, after 8 bytes of
    ones standing for the LRH."""
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + pseudo) & 0xffffffff)


def icrc6(ip6):
    """The ICRC of the IPv6 datagram IP6 (bytes from its IPv6 header to the
    end of its ICRC; UDP right after the fixed header)."""
    m = bytearray(ip6[:-4])
    m[0] |= 0x0f                  # traffic class (high 4 bits), version kept
    m[1:4] = b"\xff\xff\xff"      # traffic class (low 4 bits), flow label
    m[7] = 0xff                   # hop limit
    m[40 + 6:40 + 8] = b"\xff\xff"  # UDP checksum
    m[48 + 4] = 0xff              # BTH FECN, BECN, reserved
    return icrc(bytes(m))


def icrc4(ip4):
    """The same for an IPv4 datagram without options: only to check the
    conventions above against scapy's own IPv4 ICRC."""
    m = bytearray(ip4[:-4])
    m[1] = 0xff                   # TOS
    m[8] = 0xff                   # TTL
    m[10:12] = b"\xff\xff"        # header checksum
    m[20 + 6:20 + 8] = b"\xff\xff"  # UDP checksum
    m[28 + 4] = 0xff
    return icrc(bytes(m))


def self_check():
    """This file's ICRC against scapy's, on packets scapy builds: IPv4 always;
    IPv6 where this scapy computes it (returns True then)."""
    from scapy.packet import Raw
    p = IP(bytes(IP(src="10.1.2.3", dst="10.3.2.1", tos=0x02, ttl=64, flags="DF") /
                 UDP(sport=49152, dport=4791) /
                 BTH(opcode=0x04, dqpn=0x123456, psn=0x654321, becn=1) / Raw(b"x" * 64)))
    if not icrc4(bytes(p)) == bytes(p)[-4:] == p[BTH].compute_icrc(None):
        fail("self-check: the ICRC computed here is not scapy's on an IPv4 packet")
    q = IPv6(src="fd00::1", dst="fd00::2", tc=0x02, fl=0x12345, hlim=64) / \
        UDP(sport=49152, dport=4791) / BTH(opcode=0x04, dqpn=0x123456, psn=1) / Raw(b"y" * 64)
    lvl = scapy.error.log_runtime.level
    scapy.error.log_runtime.setLevel(100)  # scapy 2.5: "not supported" warning
    try:
        built = IPv6(bytes(q))
        ok6 = built[BTH].compute_icrc(None) != b"\0\0\0\0"
    finally:
        scapy.error.log_runtime.setLevel(lvl)
    if ok6 and icrc6(bytes(built)) != built[BTH].compute_icrc(None):
        fail("self-check: the IPv6 ICRC computed here is not this scapy's")
    print(f"ICRC: checked against scapy's on IPv4; scapy {scapy.VERSION} "
          f"{'computes the IPv6 ICRC too' if ok6 else 'has no IPv6 ICRC (A17.8 masks here)'}")
    return ok6


def check(pcap, addr_a, addr_b, segments, expected):
    a, b = addr(addr_a), addr(addr_b)
    scapy_v6 = self_check()
    seg_t, seg_name, expect = read_segments(segments)  # expect: {"ce": N, "refused": 1}
    expected = {int(x, 16) for x in expected.split(",")}

    pkts = rdpcap(pcap)
    counts = collections.Counter()
    per_seg = collections.Counter()     # (segment, "A"/"B") -> packets sent
    ce = collections.Counter()          # segment -> CE-marked packets from B
    cnps = collections.Counter()        # segment -> CNPs from A
    v4 = 0
    lvl = scapy.error.log_runtime.level
    scapy.error.log_runtime.setLevel(100)
    for i, p in enumerate(pkts, 1):
        if IP in p:
            v4 += 1
            fail(f"frame {i}: IPv4 {p[IP].src} -> {p[IP].dst} (every packet must be IPv6)")
            continue
        if IPv6 not in p or UDP not in p:
            fail(f"frame {i}: not IPv6/UDP: {p.summary()}")
            continue
        ip, udp = p[IPv6], p[UDP]
        raw6 = bytes(ip)
        seg, sname = segment_of(p, seg_t, seg_name)
        faults = expect.get(sname, {})
        src, dst = addr(ip.src), addr(ip.dst)
        where = f"frame {i} [{sname}] ([{ip.src}]:{udp.sport} -> [{ip.dst}]:{udp.dport}"
        if (src, dst) not in ((a, b), (b, a)):
            fail(f"{where}): not between {a} and {b}")
            continue
        side = "A" if src == a else "B"
        per_seg[seg, side] += 1
        if ip.nh != 17 or udp.dport != 4791 or BTH not in p:
            fail(f"{where}): next header {ip.nh}, scapy found "
                 f"{'a' if BTH in p else 'no'} BTH")
            continue
        bth = p[BTH]
        op = bth.opcode
        counts[op] += 1
        where += f" op {op:#04x} qpn {bth.dqpn:#x} psn {bth.psn:#x})"
        if op not in OPCODES or op not in expected:
            fail(f"{where}: opcode not expected")
            continue
        name, ext, role, _ = OPCODES[op]
        if bth.version != 0 or bth.pkey != 0xffff:
            fail(f"{where}: TVer {bth.version}, P_Key {bth.pkey:#x}")
        if ip.plen != len(raw6) - 40 or udp.len != ip.plen:
            fail(f"{where}: IPv6 payload length {ip.plen}, UDP length {udp.len}, "
                 f"datagram {len(raw6) - 40} bytes")
            continue
        body = bytes(bth.payload)  # headers after the BTH, payload, pad (no ICRC)
        if len(body) < ext or (len(body) - ext) % 4:
            fail(f"{where}: {len(body)} bytes after the BTH ({name} headers: {ext})")
        want = icrc6(raw6)
        if raw6[-4:] != want:
            fail(f"{where}: ICRC {raw6[-4:].hex()} on the packet, IPv6 A17.8 gives "
                 f"{want.hex()}")
        elif scapy_v6 and bth.compute_icrc(None) != want:
            fail(f"{where}: scapy computes ICRC {bth.compute_icrc(None).hex()}")
        ecn = ip.tc & 3
        if ecn == 3:
            if "ce" not in faults or side != "B":
                fail(f"{where}: ECN CE from {side} (only B marks, in a SOFTVERBS_FAULTS ce "
                     "segment)")
            ce[seg] += 1
        elif ecn != 2:
            fail(f"{where}: traffic class {ip.tc:#04x}: ECN {ecn:#04b}, expected ECT(0) 0b10")
        if op == 0x81:
            if (bth.fecn, bth.becn, bth.psn, bth.ackreq) != (0, 1, 0, 0) or body != bytes(16):
                fail(f"{where}: CNP with FECN {bth.fecn} BECN {bth.becn} AckReq "
                     f"{bth.ackreq}, after the BTH {body.hex()}")
            if side == "A":
                cnps[seg] += 1
            if "ce" in faults and (side != "A" or not ce[seg]):
                fail(f"{where}: CNP from {side} before any CE-marked packet from B")
    scapy.error.log_runtime.setLevel(lvl)

    print(f"scapy: {len(pkts)} packets, {len(pkts) - v4} IPv6, {v4} IPv4")
    opcode_report(counts, expected)
    for name, seg, faults in expected_segments(expect, seg_name):
        print(f"segment {name}: {per_seg[seg, 'A']} packets from A, {per_seg[seg, 'B']} from "
              f"B, {ce[seg]} CE-marked, {cnps[seg]} CNPs; {faults}")
        if "ce" in faults:
            check_ce(name, ce[seg], cnps[seg], faults["ce"], "packets")
        if "refused" in faults:
            if not per_seg[seg, "B"]:
                fail(f"segment {name}: no packet from B (nothing for A to refuse)")
            if per_seg[seg, "A"]:
                fail(f"segment {name}: A, which does not admit B, sent {per_seg[seg, 'A']} "
                     "packets")
    tshark_check(pcap, pkts)
    for seg, n in sorted(cnps.items()):
        if "ce" not in expect.get(seg_name[seg] if seg_name else "-", {}):
            print(f"segment {seg_name[seg]}: {n} CNPs without CE on the wire (the "
                  "receiver's own marks when its socket fills)")


def tshark_check(pcap, pkts):
    """Where tshark is installed, its InfiniBand dissector (RoCEv2 on UDP
    4791) must read each frame's BTH opcode and IPv6 ECN as scapy does, and
    find nothing malformed and no expert error."""
    if not shutil.which("tshark"):
        print("tshark: not installed, not run")
        return
    r = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=;",
                        "-E", "occurrence=f", "-e", "frame.number", "-e", "infiniband.bth.opcode",
                        "-e", "ipv6.tclass.ecn"], capture_output=True, text=True)
    if r.returncode:
        fail(f"tshark exited {r.returncode}: {r.stderr.strip()}")
    rows = [line.split(";") for line in r.stdout.splitlines() if line.strip()]
    if len(rows) != len(pkts):
        fail(f"tshark read {len(rows)} frames, scapy {len(pkts)}")
    for row in rows:
        num, op, ecn = (row + ["", ""])[:3]
        p = pkts[int(num) - 1]
        if IPv6 not in p or BTH not in p:
            continue
        if not op or int(op, 0) != p[BTH].opcode:
            fail(f"tshark: frame {num} opcode '{op}', scapy {p[BTH].opcode:#x}")
        if not ecn or int(ecn, 0) != p[IPv6].tc & 3:
            fail(f"tshark: frame {num} IPv6 ECN '{ecn}', scapy {p[IPv6].tc & 3}")
    bad = tshark_bad(pcap)
    if bad:
        fail("tshark: malformed frames or expert errors:\n" + "\n".join(bad)[:3000])
    print(f"tshark: {len(rows)} frames, opcodes and ECN as scapy reads them")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "devinfo" and len(sys.argv) == 5:
        devinfo(*sys.argv[2:])
    elif cmd == "gids" and len(sys.argv) >= 5:
        gids(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "check" and len(sys.argv) == 7:
        check(*sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(2)
    finish()


if __name__ == "__main__":
    main()
