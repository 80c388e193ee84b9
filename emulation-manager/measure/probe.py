"""Measure what the emulated network does: RTT, jitter and loss per pair, with ping.

`collapsar run --probe N` sends N pings over every probed pair right after the
paths are shaped and before any command starts, so nothing else is queued in
the classes it measures (a bulk flow in the same class would add its queueing
delay to every echo).  The t=0 state is what gets measured; the timeline
starts once the probe is done.

An echo crosses two paths: the request src -> dst and the reply dst -> src,
each shaped at its own sender's egress.  So the expected RTT is the sum of
the two one-way delays, the jitter of the RTT adds both in quadrature, and
an echo is lost when either direction drops it.  Loss is reported with its
sample size: 50 echoes cannot tell 0.1% from 0%, and the table says so
rather than pretending.

ping is the real iputils ping run in the source's namespace (root may use
intervals under 0.2 s); pairs are probed in parallel, a bounded number at a
time, because each pair waits mostly on emulated delay.
"""

from __future__ import annotations

import math
import re
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from collapsar.errors import RunError
from collapsar.model import Path

INTERVAL_S = 0.02
PARALLEL = 16
# All ordered pairs up to this many; beyond it one instance per service.
ALL_PAIRS_LIMIT = 64

_SENT = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")
_ECHO = re.compile(r"icmp_seq=\d+ .*time=([\d.]+) ms")


@dataclass(frozen=True)
class Expected:
    rtt_us: int
    jitter_us: int
    loss_ratio: float


@dataclass(frozen=True)
class Measured:
    src: str
    dst: str
    sent: int
    received: int
    # The median, not ping's mean: an emulated machine's scheduling hiccups
    # put a few echoes tens of ms late, and the mean would carry them.
    rtt_median_us: int | None  # None: no echo came back
    rtt_std_us: int | None  # the spread the configured jitter should produce

    @property
    def loss_ratio(self) -> float:
        return 1 - self.received / self.sent if self.sent else 0.0


def expected(forward: Path | None, reverse: Path | None) -> Expected | None:
    """What an echo over this pair should see; None when either way is cut."""
    if forward is None or reverse is None:
        return None
    return Expected(
        rtt_us=forward.delay_us + reverse.delay_us,
        jitter_us=round(math.hypot(forward.jitter_us, reverse.jitter_us)),
        loss_ratio=1 - (1 - forward.loss_ratio) * (1 - reverse.loss_ratio),
    )


def pairs_to_probe(instances_by_service: dict[str, list[str]]) -> list[tuple[str, str]]:
    everyone = [i for names in instances_by_service.values() for i in names]
    if len(everyone) * (len(everyone) - 1) > ALL_PAIRS_LIMIT:
        everyone = [names[0] for names in instances_by_service.values() if names]
    return [(a, b) for a in everyone for b in everyone if a != b]


def parse_ping(src: str, dst: str, output: str) -> Measured:
    counts = _SENT.search(output)
    if counts is None:
        raise RunError(f"probe {src} -> {dst}: ping printed no summary: {output.strip()[-200:]!r}")
    sent, received = int(counts.group(1)), int(counts.group(2))
    rtts_ms = [float(ms) for ms in _ECHO.findall(output)]
    if not rtts_ms:
        return Measured(src, dst, sent, received, None, None)
    return Measured(
        src, dst, sent, received, round(statistics.median(rtts_ms) * 1000), round(statistics.pstdev(rtts_ms) * 1000)
    )


def ping_argv(netns: str, ip: str, count: int, timeout_s: float) -> list[str]:
    return [
        "ip",
        "netns",
        "exec",
        netns,
        "ping",
        "-n",
        "-c",
        str(count),
        "-i",
        str(INTERVAL_S),
        "-W",
        f"{timeout_s:g}",
        ip,
    ]


def probe(
    pairs: list[tuple[str, str]], netns_of: dict[str, str], ip_of: dict[str, str], count: int, timeout_s: float = 3.0
) -> list[Measured]:
    def one(pair: tuple[str, str]) -> Measured:
        src, dst = pair
        argv = ping_argv(netns_of[src], ip_of[dst], count, timeout_s)
        # Generous: on a loaded host (or in --vm's emulated CPUs) ping runs
        # many times slower than its schedule, and a slow probe is still a
        # measurement.  Only a hung one is given up on, and reported as such.
        limit_s = 5 * (count * INTERVAL_S + timeout_s) + 60
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=limit_s)
        except FileNotFoundError:
            raise RunError("probe: `ip` not found; install iproute2") from None
        except subprocess.TimeoutExpired:
            return Measured(src, dst, 0, 0, None, None)  # "not measured" in the table
        if "not found" in done.stderr or "No such file" in done.stderr:
            raise RunError(f"probe: ping is missing ({done.stderr.strip()}); install iputils-ping")
        return parse_ping(src, dst, done.stdout)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(one, pairs))


def as_records(measured: list[Measured], want: dict[tuple[str, str], Expected | None]) -> list[dict]:
    """probe.json: one record per pair, configured next to measured."""
    records = []
    for m in measured:
        exp = want.get((m.src, m.dst))
        records.append({**asdict(m), "loss_ratio": m.loss_ratio, "expected": None if exp is None else asdict(exp)})
    return records


def _ms(us: int | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"


def _loss(ratio: float) -> str:
    return f"{ratio * 100:.3g}%"


def probe_table(records: list[dict]) -> list[str]:
    rows = [
        (
            "pair",
            "RTT configured",
            "measured (median)",
            "jitter configured",
            "measured (std)",
            "loss configured",
            "measured (echoes)",
        )
    ]
    for r in records:
        exp = r["expected"]
        rows.append(
            (
                f"{r['src']} -> {r['dst']}",
                "cut" if exp is None else _ms(exp["rtt_us"]),
                _ms(r["rtt_median_us"]),
                "-" if exp is None else _ms(exp["jitter_us"]),
                _ms(r["rtt_std_us"]),
                "100%" if exp is None else _loss(exp["loss_ratio"]),
                f"{_loss(r['loss_ratio'])} ({r['sent'] - r['received']}/{r['sent']})"
                if r["sent"]
                else "not measured (ping hung)",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
