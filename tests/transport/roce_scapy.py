#!/usr/bin/python3
"""transport_roce_wire.scapy: softverbs' RoCEv2 packet format against scapy's
RoCE layer (scapy.contrib.roce), which nobody here wrote and which computes
the ICRC with its own code.

  1. The datagrams softverbs encodes (transport_roce_wire --emit) are put
     behind an IPv4 header as Linux sends them (identification 0, DF) and a
     UDP header to port 4791, and parsed by scapy: each is a BTH with the
     expected opcode, destination QP, PSN, SE, AckReq and pad count, the
     payload has the expected length, and the ICRC that scapy computes is
     the one on the packet.
  2. scapy builds packets of its own (ICRC computed by scapy), and
     transport_roce_wire --decode must take each in with its fields.

Usage: roce_scapy.py PATH_TO_transport_roce_wire WORKDIR
Exits 77 (CTest: skipped) when scapy is not installed.
"""
import os
import random
import struct
import subprocess
import sys

try:
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
    from scapy.contrib.roce import BTH
except ImportError:
    print("SKIP: scapy's RoCE layer (scapy.contrib.roce) not found: install Debian package "
          "python3-scapy (apt-get install python3-scapy; scripts/install-deps.sh --all "
          "installs every package the tests use)")
    sys.exit(77)

tool, work = sys.argv[1], sys.argv[2]
emitted = os.path.join(work, "roce_emitted.txt")
built = os.path.join(work, "roce_scapy_built.txt")
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL:", msg)


# header bytes after the BTH, per softverbs opcode (IBA: RETH 16, AETH 4,
# AtomicETH 28, AtomicAckETH 8, ImmDt 4, IETH 4, DETH 8)
EXT = {0x04: 0, 0x05: 4, 0x00: 0, 0x06: 16, 0x07: 0, 0x09: 4, 0x0c: 16, 0x0d: 4,
       0x0e: 0, 0x11: 4, 0x13: 28, 0x14: 28, 0x12: 12, 0x17: 4, 0x2a: 16, 0x65: 12}

subprocess.run([tool, "--emit", emitted], check=True)
n = 0
for line in open(emitted):
    f = line.split()
    dgram = bytes.fromhex(f[0])
    src, dst, sport = f[1], f[2], int(f[3])
    opcode, dqpn, psn, se, ack, plen = (int(x) for x in f[4:10])
    pkt = IP(raw := bytes(IP(src=src, dst=dst, id=0, flags="DF", ttl=64, tos=0x02) /
                          UDP(sport=sport, dport=4791) / Raw(dgram)))
    n += 1
    if BTH not in pkt:
        fail(f"scapy found no BTH in opcode {opcode:#x}")
        continue
    b = pkt[BTH]
    want = dict(opcode=opcode, dqpn=dqpn, psn=psn, solicited=se, ackreq=ack,
                padcount=(4 - plen % 4) % 4, version=0, pkey=0xffff)
    for k, v in want.items():
        if getattr(b, k) != v:
            fail(f"opcode {opcode:#x}: scapy reads {k}={getattr(b, k)}, expected {v}")
    body = len(bytes(b.payload)) if b.payload else 0
    if body != EXT[opcode] + plen + want["padcount"]:
        fail(f"opcode {opcode:#x}: {body} bytes after the BTH, expected "
             f"{EXT[opcode]} + {plen} + pad {want['padcount']}")
    if struct.pack("!I", b.icrc) != b.compute_icrc(None):
        fail(f"opcode {opcode:#x} plen {plen}: ICRC {b.icrc:#010x} on the packet, "
             f"scapy computes {struct.unpack('!I', b.compute_icrc(None))[0]:#010x}")
print(f"scapy parsed {n} datagrams from softverbs")
if n == 0:
    fail("nothing emitted")

# packets built by scapy, for softverbs to decode
random.seed(4791)
with open(built, "w") as out:
    for opcode in sorted(EXT):
        for plen in range(0, 9):
            if opcode in (0x0c, 0x11, 0x13, 0x14, 0x12) and plen:
                continue  # no payload: READ request, ACK, atomics
            dqpn, psn = random.randrange(1 << 24), random.randrange(1 << 24)
            se, ack = random.randrange(2), random.randrange(2)
            pad = (4 - plen % 4) % 4
            body = bytes(random.randrange(256) for _ in range(EXT[opcode] + plen)) + b"\0" * pad
            sport = random.randrange(49152, 65536)
            p = IP(src="10.211.9.1", dst="10.211.9.2", id=0, flags="DF") / \
                UDP(sport=sport, dport=4791) / \
                BTH(opcode=opcode, solicited=se, padcount=pad, dqpn=dqpn, ackreq=ack,
                    psn=psn) / Raw(body)
            p = IP(bytes(p))  # built: scapy fills in the ICRC
            dgram = bytes(p[UDP].payload)
            out.write(f"{dgram.hex()} 10.211.9.1 10.211.9.2 {sport} {opcode} {dqpn} {psn} "
                      f"{se} {ack} {plen}\n")
r = subprocess.run([tool, "--decode", built])
if r.returncode:
    fail("softverbs refused or misread packets built by scapy")
sys.exit(1 if fails else 0)
