"""Shared parts of the RoCEv2 wire tests (rocev2_pcap.py, rocev2_inject.py):
driving rocev2_agent (a verbs program that takes commands on stdin) in a
network namespace, and the IBA opcode table the checks need."""
import os
import select
import subprocess
import time


class AgentError(Exception):
    pass


class Agent:
    """One rocev2_agent process in network namespace NS on device DEV, over
    SOFTVERBS_TRANSPORT=rocev2.  cmd() sends a line and returns the reply
    (its "ok ..." line and the lines before it); every wait has a deadline."""

    def __init__(self, agent, ns, dev, log, env=None):
        e = dict(os.environ)
        e["SOFTVERBS_TRANSPORT"] = "rocev2"
        e.update(env or {})
        argv = ([] if not ns else ["ip", "netns", "exec", ns]) + [agent, dev]
        self.name = f"{dev}@{ns or 'host'}"
        self.log = log
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=log, env=e)
        self.buf = b""
        first = self._line(20)
        if first != "ready":
            raise AgentError(f"{self.name}: did not start ({first!r})")

    def _line(self, timeout):
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise AgentError(f"{self.name}: no answer within {timeout} s")
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 65536)
                if not chunk:
                    raise AgentError(f"{self.name}: exited ({self.p.poll()})")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def cmd(self, line, timeout=10):
        """Send LINE; return (fields of the ok line as a dict, other lines)."""
        self.log.write(f"[{self.name}] > {line}\n".encode())
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()
        extra = []
        while True:
            ans = self._line(timeout)
            self.log.write(f"[{self.name}] < {ans}\n".encode())
            if ans.startswith("ok"):
                return kv(ans[2:]), extra
            if ans.startswith("err"):
                raise AgentError(f"{self.name}: '{line}' -> {ans}")
            extra.append(ans)

    def info(self):
        return self.cmd("info")[0]

    def qp(self, kind):
        d = self.cmd(f"qp {kind}")[0]
        return int(d["idx"]), int(d["qpn"], 16)

    def poll(self, n, ms=3000):
        d, lines = self.cmd(f"poll {n} {ms}", timeout=ms / 1000 + 10)
        return [kv(l[2:]) for l in lines if l.startswith("wc")]

    def peek(self, off, length):
        self.log.write(f"[{self.name}] > peek {off} {length}\n".encode())
        self.p.stdin.write(f"peek {off} {length}\n".encode())
        self.p.stdin.flush()
        ans = self._line(10)
        if not ans.startswith("ok "):
            raise AgentError(f"{self.name}: peek -> {ans}")
        return bytes.fromhex(ans[3:])

    def poke(self, off, data):
        self.cmd(f"poke {off} {data.hex()}")

    def close(self):
        try:
            self.p.stdin.write(b"quit\n")
            self.p.stdin.flush()
            self.p.wait(10)
        except Exception:
            pass
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        return self.p.returncode


def kv(s):
    out = {}
    for tok in s.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


# IBA opcodes (table 38): name, bytes of headers after the BTH, role
#   role: "req" (a request), "resp" (RC responses), "cnp" (a congestion
#   notification, annex A17.9.2: 16 reserved bytes after the BTH), and for
#   multi-packet messages the position: first / middle / last / only.
def _ops():
    t = {}
    rcuc = [  # low 5 bits, name, ext bytes, position
        (0x00, "SEND_FIRST", 0, "first"), (0x01, "SEND_MIDDLE", 0, "middle"),
        (0x02, "SEND_LAST", 0, "last"), (0x03, "SEND_LAST_WITH_IMMEDIATE", 4, "last"),
        (0x04, "SEND_ONLY", 0, "only"), (0x05, "SEND_ONLY_WITH_IMMEDIATE", 4, "only"),
        (0x06, "RDMA_WRITE_FIRST", 16, "first"), (0x07, "RDMA_WRITE_MIDDLE", 0, "middle"),
        (0x08, "RDMA_WRITE_LAST", 0, "last"),
        (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", 4, "last"),
        (0x0a, "RDMA_WRITE_ONLY", 16, "only"),
        (0x0b, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", 20, "only"),
    ]
    for low, name, ext, pos in rcuc:
        t[low] = ("RC_" + name, ext, "req", pos)
        t[0x20 | low] = ("UC_" + name, ext, "req", pos)
    t.update({
        0x0c: ("RC_RDMA_READ_REQUEST", 16, "req", "only"),
        0x0d: ("RC_RDMA_READ_RESPONSE_FIRST", 4, "resp", "first"),
        0x0e: ("RC_RDMA_READ_RESPONSE_MIDDLE", 0, "resp", "middle"),
        0x0f: ("RC_RDMA_READ_RESPONSE_LAST", 4, "resp", "last"),
        0x10: ("RC_RDMA_READ_RESPONSE_ONLY", 4, "resp", "only"),
        0x11: ("RC_ACKNOWLEDGE", 4, "resp", "only"),
        0x12: ("RC_ATOMIC_ACKNOWLEDGE", 12, "resp", "only"),
        0x13: ("RC_COMPARE_SWAP", 28, "req", "only"),
        0x14: ("RC_FETCH_ADD", 28, "req", "only"),
        0x64: ("UD_SEND_ONLY", 8, "req", "only"),
        0x65: ("UD_SEND_ONLY_WITH_IMMEDIATE", 12, "req", "only"),
        0x81: ("CNP", 16, "cnp", "only"),
    })
    return t


OPCODES = _ops()
RC_OPS = sorted(o for o in OPCODES if o < 0x20)
UC_OPS = sorted(o for o in OPCODES if 0x20 <= o < 0x40)
UD_OPS = [0x64, 0x65]
