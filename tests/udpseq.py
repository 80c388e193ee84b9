"""A paced stream of numbered UDP datagrams between two namespaces, and what
arrived: order, copies, gaps, damaged payloads and one-way delays.

Standard library only (the VM tier imports it in an emulated CPU).  Run as a
program inside a namespace (`recv` or `send`); `stream()` runs both.

Each datagram carries its number (8 bytes), its send time on CLOCK_MONOTONIC
in ns (8 bytes: both namespaces read the same clock) and a pattern derived
from its number, so the receiver tells a damaged payload from a good one.
The sender sets SO_NO_CHECK (no UDP checksum), so a datagram whose payload
was damaged on the way is delivered and counted instead of dropped.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field

HEAD = struct.Struct("!QQ")  # number, send time (ns)
SO_NO_CHECK = 11
SO_RCVBUFFORCE = 33  # root may exceed rmem_max
PORT = 40999


_PATTERNS: dict[tuple[int, int], bytes] = {}


def pattern(number: int, size: int) -> bytes:
    """The payload of datagram `number`: one of 251 patterns, made once each
    (an emulated CPU cannot afford to build one per datagram)."""
    key = (number % 251, size)
    if key not in _PATTERNS:
        _PATTERNS[key] = bytes((key[0] + i) % 251 for i in range(size))
    return _PATTERNS[key]


def rcvbuf_errors() -> int:
    """This namespace's UDP datagrams dropped for a full receive buffer."""
    with open("/proc/net/snmp") as snmp:
        rows = [line.split() for line in snmp if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


def send(dst_ip: str, count: int, interval_s: float, size: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
    body = size - HEAD.size
    start = time.monotonic()
    for number in range(count):
        due = start + number * interval_s
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        sock.sendto(HEAD.pack(number, time.monotonic_ns()) + pattern(number, body), (dst_ip, PORT))


def receive(bind_ip: str, idle_s: float, limit_s: float) -> None:
    """Print `ready`, then, once no datagram came for `idle_s` after the first
    (or `limit_s` passed), one JSON line: arrivals [number, delay_ns] in
    arrival order, the count of damaged datagrams, and how many the
    namespace dropped for a full receive buffer meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
    sock.bind((bind_ip, PORT))
    dropped_before = rcvbuf_errors()
    print("ready", flush=True)
    arrivals, damaged = [], 0
    deadline = time.monotonic() + limit_s
    sock.settimeout(limit_s)
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        now = time.monotonic_ns()
        sock.settimeout(idle_s)
        if len(data) < HEAD.size:
            damaged += 1
            continue
        number, sent = HEAD.unpack_from(data)
        if data[HEAD.size :] != pattern(number, len(data) - HEAD.size):
            damaged += 1
            continue
        arrivals.append([number, now - sent])
    dropped = rcvbuf_errors() - dropped_before
    print(json.dumps({"arrivals": arrivals, "damaged": damaged, "overflowed": dropped}), flush=True)


@dataclass
class Stream:
    """What arrived of `count` datagrams numbered 0..count-1."""

    count: int
    arrivals: list[tuple[int, int]]  # (number, one-way delay in ns), in arrival order
    damaged: int
    numbers: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.numbers = [number for number, _ in self.arrivals]

    def lost(self) -> list[bool]:
        """Per number: never arrived whole (a damaged datagram is not an arrival)."""
        seen = set(self.numbers)
        return [number not in seen for number in range(self.count)]

    def loss_runs(self) -> list[int]:
        """The lengths of the runs of consecutive lost numbers."""
        runs, current = [], 0
        for lost in self.lost():
            if lost:
                current += 1
            elif current:
                runs.append(current)
                current = 0
        return runs + ([current] if current else [])

    def duplicated(self) -> int:
        """Numbers that arrived more than once."""
        counts: dict[int, int] = {}
        for number in self.numbers:
            counts[number] = counts.get(number, 0) + 1
        return sum(1 for c in counts.values() if c > 1)

    def late(self) -> int:
        """Arrivals after a higher number had arrived (RFC 4737's reordered packets)."""
        highest, late = -1, 0
        for number in self.numbers:
            if number < highest:
                late += 1
            highest = max(highest, number)
        return late

    def early(self) -> int:
        """Arrivals ahead of a lower number that arrived later (packets that
        overtook others: what netem's reordering does to a packet)."""
        lowest_after, early = self.count, 0
        for number in reversed(self.numbers):
            if number > lowest_after:
                early += 1
            lowest_after = min(lowest_after, number)
        return early

    def delays_ms(self) -> list[float]:
        return [delay / 1e6 for _, delay in self.arrivals]


def stream(src_ns: str, dst_ns: str, dst_ip: str, count: int, interval_s: float, size: int = 1000) -> Stream:
    """Send `count` datagrams of `size` bytes from `src_ns` to `dst_ip` in `dst_ns`."""
    me = [sys.executable, __file__]
    limit_s = count * interval_s * 10 + 60
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", dst_ns, *me, "recv", dst_ip, "3", str(limit_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().strip() == "ready"
        subprocess.run(
            ["ip", "netns", "exec", src_ns, *me, "send", dst_ip, str(count), str(interval_s), str(size)],
            check=True,
            timeout=limit_s,
        )
        out, _ = receiver.communicate(timeout=limit_s)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    report = json.loads(out)
    # A receiver that fell behind would show loss that no link caused.
    assert report["overflowed"] == 0, f"the receiver's buffer overflowed {report['overflowed']} times"
    return Stream(count, [(number, delay) for number, delay in report["arrivals"]], report["damaged"])


def main(argv: list[str]) -> None:
    if argv[0] == "send":
        send(argv[1], int(argv[2]), float(argv[3]), int(argv[4]))
    elif argv[0] == "recv":
        receive(argv[1], float(argv[2]), float(argv[3]))
    else:
        raise SystemExit(f"usage: {__file__} send DST COUNT INTERVAL_S SIZE | recv BIND IDLE_S LIMIT_S")


if __name__ == "__main__":
    main(sys.argv[1:])
