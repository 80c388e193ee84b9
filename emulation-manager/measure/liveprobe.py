"""`--probe-every INTERVAL`: the RTT of probed pairs all through a run.

One iputils ping per probed pair (the pairs `--probe` takes, among all the
run's instances: every ordered pair up to 64, else one instance per
service), run in the source's namespace from t=0 to the end, one echo every
INTERVAL, with `-D` (each reply line stamped with the wall clock).  One
thread reads them all.  Per whole second and pair the run writes the echo
requests sent in that second and how many of them were answered (by
icmp_seq: a reply that arrives in the next second is not a loss), and their
RTT's min, median and max to
series/rtt.csv, next to the RTT the paths configured then (measure/series.py).

What it costs: a process per pair (sleeping between echoes; at most
MAX_PAIRS: with more services the pairs among the first of them), and 1/INTERVAL
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

_ECHO = re.compile(r"^\[(\d+\.\d+)\] .*icmp_seq=(\d+) .*time=([\d.]+) ms")


MAX_PAIRS = 256  # ping processes a run starts at most


def capped(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """At most MAX_PAIRS of `pairs`: every pair among the first instances
    (in the order the pairs name them) that fit, so what is probed is a
    whole corner of the topology, both ways."""
    if len(pairs) <= MAX_PAIRS:
        return pairs
    names = list(dict.fromkeys(name for pair in pairs for name in pair))
    keep = 1
    while (keep + 1) * keep <= MAX_PAIRS:
        keep += 1
    chosen = set(names[:keep])
    return [(src, dst) for src, dst in pairs if src in chosen and dst in chosen]


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
        self._echoes: dict[tuple[str, str], list[tuple[int, float, float]]] = {}  # pair -> (seq, sent s, RTT ms)
        self._started_s: dict[tuple[str, str], float] = {}  # pair -> experiment time its ping started
        self._latest: dict[tuple[str, str], tuple[float, int, int]] = {}  # pair -> (last RTT ms, top seq, replies)
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
            self._started_s[(src, dst)] = time.time() - t0_unix_s
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
        rtt_ms = float(echo.group(3))
        sent_s = float(echo.group(1)) - rtt_ms / 1000 - self.t0_unix_s  # its echo request left then
        seq = int(echo.group(2))
        self._echoes.setdefault(pair, []).append((seq, sent_s, rtt_ms))
        _, top, replies = self._latest.get(pair, (0.0, 0, 0))
        self._latest[pair] = (rtt_ms, max(top, seq), replies + 1)

    def latest(self) -> list[dict]:
        """Per pair so far: the last echo's RTT (ms), the echo requests up to
        the last one answered (ping's icmp_seq) and the replies, for the
        status snapshot and /metrics while the run goes."""
        rows = []
        for (src, dst), (rtt_ms, requests, replies) in sorted(self._latest.items()):
            rows.append({"src": src, "dst": dst, "rtt_ms": rtt_ms, "requests": requests, "replies": replies})
        return rows

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
        that second: None when no path either way).  Each echo request
        counts in the second it was sent (its reply's time less its RTT),
        lost or not: `sent` counts the requests ping numbered (icmp_seq)
        that left in that second, and `received` those of them answered, so
        an echo that comes back in the next second is not a loss."""
        out = []
        by_second = {pair: self._seconds_of(pair) for pair in self.pairs}
        for second in range(1, int(self._stopped_s) + 1):
            for src, dst in self.pairs:
                sent, rtts = by_second[(src, dst)].get(second, (0, []))
                stats = (min(rtts), statistics.median(rtts), max(rtts)) if rtts else (None, None, None)
                out.append((second, src, dst, sent, len(rtts), *stats, configured_rtt_ms(second, src, dst)))
        return out

    def _seconds_of(self, pair: tuple[str, str]) -> dict[int, tuple[int, list[float]]]:
        """Per second: echo requests sent and the RTTs of those answered.
        A request never answered leaves no line: between two answered ones
        the requests sent are as many as their sequence numbers differ, or
        as many intervals as lie between their send times when that is more
        (ping does not number what it could not send, as on a path cut
        without netem), spread evenly; before the first answer they go back
        to the ping's start, after the last one on to the end, an interval
        apart."""
        step = self.interval_s
        echoes = sorted(self._echoes.get(pair, []))
        sends: list[float] = []
        previous = (0, self._started_s.get(pair, echoes[0][1] if echoes else 0.0) - step)
        for seq, sent, _ in echoes:
            count = max(seq - previous[0], round((sent - previous[1]) / step))
            sends += [previous[1] + (sent - previous[1]) * k / count for k in range(1, count)]
            sends.append(sent)
            previous = (seq, sent)
        at = previous[1] + step
        while at < self._stopped_s:
            sends.append(at)
            at += step
        seconds: dict[int, tuple[int, list[float]]] = {}
        for sent in sends:
            count, rtts = seconds.get(int(sent // 1) + 1, (0, []))
            seconds[int(sent // 1) + 1] = (count + 1, rtts)
        for _, sent, rtt in echoes:
            seconds.setdefault(int(sent // 1) + 1, (0, []))[1].append(rtt)
        return seconds
