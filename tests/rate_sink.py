"""A sink and a source that record what arrived when, for the rate tests of
traced links (tests/kernel/test_local_trace.py, tests/vm/test_trace_vm.py).

    python rate_sink.py sink PORT OUT.csv [SECONDS]
        receive UDP datagrams for SECONDS, or until SIGTERM (the run's end),
        then write OUT.csv: wall_s,bytes per datagram
    python rate_sink.py send HOST PORT RATE_BPS SECONDS
        send DATAGRAM-byte datagrams to HOST:PORT, paced at RATE_BPS of payload

The sink reads at the receiver, after the emulated link: its bytes per
window are what the link delivered, where the emulation core's counters see
what the sender offered before the link's queue.  A sender faster than the
link keeps the link's queue full, so the link is never idle for want of
data (TCP may leave it idle for a while after a loss): what arrives is the
link's rate.  `per_window` sums a sink's file into windows of a run's time,
`link_bps` turns the datagrams' payload into the rate a link counts.
"""

from __future__ import annotations

import csv
import signal
import socket
import sys
import time
from pathlib import Path

DATAGRAM = 1400
FRAME = DATAGRAM + 8 + 20 + 14  # UDP, IPv4 and Ethernet headers: what htb counts


def link_bps(payload_bytes: float, seconds: float) -> float:
    """The link rate that delivers this much payload: htb holds a link of
    rate R with Collapsar's wire overhead (on by default) to R x 1514/1538
    in frame bytes (collapsar.tcal.plan: the frame's share of the wire)."""
    return payload_bytes * 8 / seconds * FRAME / DATAGRAM * 1538 / 1514


def sink(port: int, out: Path, seconds: float) -> None:
    """A fixed time, not until the sender stops (what the link still holds
    then drains at its last rate, for seconds), or until the run stops it."""
    arrivals: list[float] = []
    end = time.monotonic() + seconds
    signal.signal(signal.SIGTERM, _stop)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            server.bind(("", port))
            while (left := end - time.monotonic()) > 0:
                server.settimeout(left if left < 3600 else None)
                try:
                    server.recv(DATAGRAM + 1)
                except TimeoutError:
                    break
                arrivals.append(time.time())
    except KeyboardInterrupt:  # SIGTERM, see _stop: what arrived so far is written
        pass
    with out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("wall_s", "bytes"))
        writer.writerows((f"{at:.6f}", DATAGRAM) for at in arrivals)


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


def send(host: str, port: int, rate_bps: float, seconds: float) -> None:
    """Paced by absolute deadlines, so a late wake-up does not lower the rate."""
    gap_s = DATAGRAM * 8 / rate_bps
    payload = bytes(DATAGRAM)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.connect((host, port))
        start = time.monotonic()
        sent = 0
        while (now := time.monotonic()) < start + seconds:
            due = start + sent * gap_s
            if now < due:
                time.sleep(due - now)
            try:
                sender.send(payload)
            except (ConnectionRefusedError, BlockingIOError):  # the sink not up yet; a full queue
                pass
            sent += 1


def per_window(path: Path, t0_wall_s: float, window_s: float, count: int) -> list[int]:
    """Bytes that arrived in each window [k * window_s, (k + 1) * window_s)
    of the run (t0_wall_s: the run's wall-clock t=0, RUNDIR/t0)."""
    totals = [0] * count
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            index = int((float(row["wall_s"]) - t0_wall_s) // window_s)
            if 0 <= index < count:
                totals[index] += int(row["bytes"])
    return totals


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink(int(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else float("inf"))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
