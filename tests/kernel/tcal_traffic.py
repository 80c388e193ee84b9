"""Traffic and inspection helpers for the TCAL kernel tests (and bench/tcal_bench.py).

Tests may run `tc` to inspect (never the code under test); traffic comes from
iperf3 (JSON output) and plain Python sockets inside the namespaces.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

# TCP goodput of a real Ethernet link at MTU 1500 with TCP timestamps:
# 1448 payload bytes per 1538 wire bytes.
ETHERNET_GOODPUT_RATIO = 1448 / 1538
NO_OVERHEAD_GOODPUT_RATIO = 1448 / 1514


def run(*argv: str, ns: str | None = None, check: bool = True, timeout: float = 60) -> str:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    done = subprocess.run([*prefix, *argv], text=True, capture_output=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def tc_json(ns: str, *what: str) -> list[dict]:
    return json.loads(run("tc", "-j", *what, ns=ns) or "[]")


_CLASS = re.compile(
    r"^class htb (?P<handle>\S+) .*?prio (?P<prio>\d+) .*?rate (?P<rate>\S+) ceil (?P<ceil>\S+)"
    r" .*?burst (?P<burst>\S+) .*?mpu (?P<mpu>\d+)b"
)
_RATE = re.compile(r" rate (?P<rate>\S+) ceil (?P<ceil>\S+)")
_BACKLOG = re.compile(r"backlog \S+ (?P<qlen>\d+)p")
_SENT = re.compile(r"Sent (?P<bytes>\d+) bytes (?P<packets>\d+) pkt \(dropped (?P<drops>\d+)")


def classes(ns: str, dev: str) -> dict[str, dict]:
    """htb classes from `tc -s -d class show` (iproute2 6.1 has no JSON for htb
    classes): handle -> prio, rate, ceil, burst, mpu, leaf, parent, bytes,
    packets, drops and qlen (its leaf's backlog in packets)."""
    out: dict[str, dict] = {}
    current: dict | None = None
    for line in run("tc", "-s", "-d", "class", "show", "dev", dev, ns=ns).splitlines():
        head = _CLASS.match(line)
        if line.startswith("class "):
            # An inner class (traffic classes: collapsar.tcal.classes) prints no prio.
            current = dict(head.groupdict()) if head else {"handle": line.split()[2], **_RATE.search(line).groupdict()}
            current["leaf"] = line.split(" leaf ")[1].split()[0] if " leaf " in line else None
            current["parent"] = line.split(" parent ")[1].split()[0] if " parent " in line else None
            out[current["handle"]] = current
            continue
        sent = _SENT.search(line)
        if sent and current is not None:
            current.update({k: int(v) for k, v in sent.groupdict().items()})
        backlog = _BACKLOG.search(line)
        if backlog and current is not None:
            current["qlen"] = int(backlog["qlen"])
    return out


def qdisc_kinds(ns: str, dev: str) -> list[tuple[str, str, str]]:
    return sorted((q["kind"], q["handle"], q.get("parent", "root")) for q in tc_json(ns, "qdisc", "show", "dev", dev))


def filters(ns: str, dev: str) -> str:
    return run("tc", "filter", "show", "dev", dev, ns=ns)


class Iperf:
    """An iperf3 server in `dst_ns` bound to `ip`, one test at a time."""

    def __init__(self, dst_ns: str, ip: str, port: int = 5201):
        self.dst_ns, self.ip, self.port = dst_ns, ip, port
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", dst_ns, "iperf3", "-s", "-J", "-B", ip, "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while f":{port}" not in run("ss", "-Hltn", ns=dst_ns):
            if time.monotonic() > deadline or self.server.poll() is not None:
                raise AssertionError(f"iperf3 server on {ip}:{port} in {dst_ns} did not start")
            time.sleep(0.05)

    def client(self, src_ns: str, seconds: int, omit: int = 1, interval: float = 1.0) -> dict:
        # After a run the server stays busy until the bottleneck queue has drained
        # to it: at 1 Mbit/s a full 1000-packet queue takes 12 s.
        deadline = time.monotonic() + 30
        while True:
            out = run(
                "iperf3",
                "-c",
                self.ip,
                "-p",
                str(self.port),
                "-t",
                str(seconds),
                "-O",
                str(omit),
                "-i",
                str(interval),
                "-J",
                "--get-server-output",
                ns=src_ns,
                timeout=seconds + omit + 30,
                check=False,
            )
            report = json.loads(out)
            error = report.get("error", "" if "server_output_json" in report else "no server report")
            if not error:
                return report
            if "busy" not in error or time.monotonic() > deadline:
                raise AssertionError(f"iperf3 to {self.ip}: {error}")
            time.sleep(1)

    def goodput_bps(self, src_ns: str, seconds: int = 4) -> float:
        """Steady-state goodput at the receiver: the server's whole intervals
        after slow start.  (The client's `sum_received` divides by a duration
        that stretches while the bottleneck queue drains, up to 8% low at 10 Mbit/s
        with a 1000-packet queue.)"""
        return receiver_goodput_bps(self.client(src_ns, seconds))

    def receiver_intervals_bps(self, src_ns: str, seconds: int, interval: float = 1.0) -> list[float]:
        report = self.client(src_ns, seconds, omit=0, interval=interval)
        return [i["sum"]["bits_per_second"] for i in report["server_output_json"]["intervals"]]

    def close(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()

    def __enter__(self) -> Iperf:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def receiver_goodput_bps(report: dict) -> float:
    intervals = [i["sum"] for i in report["server_output_json"]["intervals"] if not i["sum"].get("omitted")]
    # The server's first interval still holds the end of slow start and its last is partial.
    # Bytes over time across the whole steady window, not a median of intervals:
    # a receiver that stalls moves bytes from one interval to the next, and at
    # 1 Mbit/s one GSO packet is a tenth of an interval.
    steady = intervals[1:-1] or intervals
    return sum(i["bytes"] for i in steady) * 8 / sum(i["seconds"] for i in steady)


UDP_SENDER = """
import socket, sys
ip, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(count):
    s.sendto(b"x" * size, (ip, 9))
"""


def send_udp(src_ns: str, ip: str, count: int, payload_bytes: int) -> int:
    """Send `count` datagrams; return the layer-2 bytes the qdisc sees for them."""
    run("python3", "-c", UDP_SENDER, ip, str(count), str(payload_bytes), ns=src_ns)
    return count * (payload_bytes + 8 + 20 + 14)


def ping_loss(src_ns: str, ip: str, count: int = 3) -> float:
    out = run("ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "1", ip, ns=src_ns, check=False)
    for line in out.splitlines():
        if "packet loss" in line:
            return float(line.split("%")[0].split()[-1]) / 100
    raise AssertionError(f"no ping summary: {out!r}")
