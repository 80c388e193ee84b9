"""`--probe-every INTERVAL`: the RTT of probed pairs all through a run.

One iputils ping per probed pair (the pairs `--probe` takes, among all the
run's instances: every ordered pair up to 64, else one instance per
service), run in the source's namespace from t=0 to the end, one echo every
INTERVAL, with `-D` (each reply line stamped with the wall clock).  One
thread reads them all.  Per whole second and pair the run writes the echoes
sent (1 s / INTERVAL) and answered and the RTT's min, median and max to
series/rtt.csv, next to the RTT the paths configured then (measure/series.py).

What it costs: a process per pair (sleeping between echoes), and 1/INTERVAL
echoes of 84 bytes each way per pair: 64 pairs at 200 ms are 320 echoes a
second, about 0.2 Mbit/s on the wire in all.  The echoes go through the
same classes as the experiment's traffic, so a saturated path's queue
shows in its RTT (that is what it is for), and they take a sliver of that
path's rate.  Off by default.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable

from collapsar.errors import RunError

_ECHO = re.compile(r"^\[(\d+\.\d+)\] .*icmp_seq=\d+ .*time=([\d.]+) ms")


def argv(netns: str, ip: str, interval_s: float) -> list[str]:
    return ["ip", "netns", "exec", netns, "ping", "-n", "-D", "-i", f"{interval_s:g}", ip]


class LiveProbe:
    """Pings `pairs` from `start(t0_unix_s)` to `stop()`; `rows()` then
    gives one row per (second, pair) with at least one echo sent."""

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        netns_of: dict[str, str],
        ip_of: dict[str, str],
        interval_s: float,
        on_start: Callable[[str, int], None] = lambda src, pid: None,
    ):
        self.pairs, self.netns_of, self.ip_of = pairs, netns_of, ip_of
        self.interval_s = interval_s
        self._on_start = on_start  # (source instance, pid): the run journals it, so cleanup can kill it
        self._procs: list[tuple[tuple[str, str], subprocess.Popen]] = []
        self._rtts: dict[tuple[int, str, str], list[float]] = {}  # (second, src, dst) -> echo RTTs, ms
        self.t0_unix_s = 0.0
        self._stopped_s = 0.0  # experiment time of stop()
        self._thread: threading.Thread | None = None
        self._selector = selectors.DefaultSelector()

    def start(self, t0_unix_s: float) -> None:
        self.t0_unix_s = t0_unix_s
        for src, dst in self.pairs:
            try:
                proc = subprocess.Popen(
                    argv(self.netns_of[src], self.ip_of[dst], self.interval_s),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except FileNotFoundError:
                self.stop()
                raise RunError("--probe-every: `ip` not found; install iproute2") from None
            self._procs.append(((src, dst), proc))
            self._on_start(src, proc.pid)
            assert proc.stdout is not None
            self._selector.register(proc.stdout.fileno(), selectors.EVENT_READ, [(src, dst), b""])
        self._thread = threading.Thread(target=self._read, name="live probe", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        """Raw reads, split into lines here: a buffered reader would keep
        lines the selector no longer reports."""
        while self._selector.get_map():
            for key, _ in self._selector.select(timeout=0.5):
                pair_and_rest = key.data
                chunk = os.read(key.fd, 65536)
                if not chunk:  # its ping ended
                    self._selector.unregister(key.fd)
                    continue
                *lines, pair_and_rest[1] = (pair_and_rest[1] + chunk).split(b"\n")
                for line in lines:
                    self.take(pair_and_rest[0], line.decode("utf-8", "replace"))

    def take(self, pair: tuple[str, str], line: str) -> None:
        """One line of a pair's ping (public for the unit test)."""
        echo = _ECHO.match(line)
        if echo is None:
            return  # ping's header and summary
        second = int(float(echo.group(1)) - self.t0_unix_s) + 1  # the second ending at t_s
        self._rtts.setdefault((second, *pair), []).append(float(echo.group(2)))

    def stop(self, now_unix_s: float | None = None) -> None:
        self._stopped_s = (time.time() if now_unix_s is None else now_unix_s) - self.t0_unix_s
        for _, proc in self._procs:
            proc.send_signal(signal.SIGINT)  # ping's own way out: it flushes what it printed
        for _, proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for _, proc in self._procs:
            if proc.stdout is not None:
                proc.stdout.close()
        self._procs.clear()
        self._selector.close()

    def rows(self, configured_rtt_ms: Callable[[int, str, str], float | None]) -> list[tuple]:
        """Per whole second from t=0 to stop() and pair: (t_s, src, dst,
        sent, received, min, median, max RTT in ms, configured RTT in ms at
        that second: None when no path either way).  `sent` is what the
        probe sends in a second (1 s / interval), not ping's own count: ping
        does not count an echo the kernel refuses at once (a cut path
        without netem drops at the sender's own queue, which ping takes for
        a full buffer and waits on), so a cut path reads as all lost either way."""
        per_second = round(1 / self.interval_s)
        out = []
        for second in range(1, int(self._stopped_s) + 1):
            for src, dst in self.pairs:
                rtts = self._rtts.get((second, src, dst), [])
                stats = (min(rtts), statistics.median(rtts), max(rtts)) if rtts else (None, None, None)
                row = (second, src, dst, max(per_second, len(rtts)), len(rtts), *stats)
                out.append((*row, configured_rtt_ms(second, src, dst)))
        return out
