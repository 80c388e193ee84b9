"""Measured send rate per (instance, destination), from the TCAL's eBPF
counters, sampled once per manager period.  The rate is taken over the last
WINDOW_NS of samples: one 50 ms period holds too few packets of a slow flow
for a steady figure.

The typical rate is kept per *segment*: the stretch of the run in which the
pair's configured path stayed the same.  A median over a whole run that
changed the rate half-way is a number no one configured; per segment, each
figure sits next to the rate that was in force.  A window counts towards a
segment only if it lies wholly inside it.

Counters are attached on a background thread after the instances are up:
loading and verifying one BPF program per instance costs ~0.1 s each here,
and measurements alone must not delay the emulation.  Bandwidth sharing
needs them, though: with sharing on, the run waits for them before it
starts the commands (local/run.py).  They are optional:
where the counters library is not built the run goes on without
measurements and says so once (the shaping does not need them).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from collapsar.errors import CollapsarError
from collapsar.manager.addressing import InstanceNet
from collapsar.manager.run.stages import StageClock


class DestCounter(Protocol):
    @property
    def bytes(self) -> int: ...
    @property
    def packets(self) -> int: ...
    @property
    def wire_bytes(self) -> int: ...


class Counters(Protocol):
    """One instance's per-destination counters (collapsar.tcal.counters.Counters)."""

    def attach(self) -> Counters: ...
    def read(self) -> dict[str, DestCounter]: ...  # destination ip -> its counter
    def detach(self) -> None: ...


class Instances(Protocol):
    """Where the counters go: each instance's interface and namespace."""

    @property
    def instances(self) -> Iterable[InstanceNet]: ...


CountersFactory = Callable[[str, str], Counters]  # (ifname, netns) -> counters, not attached yet

WINDOW_NS = 1_000_000_000
ACTIVE_SAMPLES = 1200  # a minute of 50 ms periods: bounded memory in long runs
SEGMENTS_KEPT = 32  # per pair; older segments are dropped (bounded memory in long runs)


@dataclass
class Segment:
    start_ns: int
    configured_bps: int | None  # the path's rate in this segment; None: unlimited
    cut: bool = False
    end_ns: int | None = None
    # (rate, share) per window: the measured rate, and the rate the pair's
    # class allowed at its end (its path narrowed by the sharing loop's
    # share; None: unlimited, or not known)
    rates: deque = field(default_factory=lambda: deque(maxlen=ACTIVE_SAMPLES))  # sending throughout
    partial: deque = field(default_factory=lambda: deque(maxlen=ACTIVE_SAMPLES))  # idle at an edge

    def summary(self, t0_ns: int) -> dict:
        windows = self.rates or self.partial
        ordered = sorted(rate for rate, _ in windows)
        shares = sorted(share for _, share in windows if share is not None)
        middle = len(windows) // 2  # windows without a share (unlimited) count as above every number
        return {
            "start_s": (self.start_ns - t0_ns) / 1e9,
            "end_s": None if self.end_ns is None else (self.end_ns - t0_ns) / 1e9,
            "configured_bps": self.configured_bps,
            "cut": self.cut,
            "median_rate_bps": ordered[middle] if ordered else None,
            "median_share_bps": shares[middle] if middle < len(shares) else None,
            "windows": len(ordered),
        }


class Meter:
    def __init__(
        self,
        plan: Instances,
        factory: CountersFactory | None,
        say: Callable[[str], None],
        clock: StageClock | None = None,
    ):
        self._plan = plan
        self._clock = clock or StageClock()  # the bring-up's, when the run keeps one (run/stages.py)
        self._factory = factory
        self._say = say
        self._instance_of = {net.ip: net.instance for net in plan.instances}
        self._counters: dict[str, Counters] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        # (src, dst) -> recent (ns, wire bytes) samples, oldest first
        self._history: dict[tuple[str, str], deque] = {}
        self._flows: dict[tuple[str, str], dict] = {}
        self._active: dict[tuple[str, str], deque] = {}
        self._segments: dict[tuple[str, str], deque[Segment]] = {}
        self._segmented: dict[str, set[str]] = {}  # src -> dsts with segments (pairs that carried traffic)
        # The player's thread ends segments (mark_paths) while the loop's
        # samples and reads them: both hold this for the segments' structure.
        self._segments_lock = threading.Lock()
        self._new_pairs: list[tuple[str, str]] = []  # first seen since the last new_pairs()
        self._configured: Callable[[str, str], tuple[int | None, bool]] = lambda src, dst: (None, False)
        self._allowed: Callable[[str, str], int | None] = lambda src, dst: None
        self.t0_ns = time.monotonic_ns()

    def follow(
        self,
        configured: Callable[[str, str], tuple[int | None, bool]],
        t0_ns: int,
        allowed: Callable[[str, str], int | None] | None = None,
    ) -> None:
        """Where segments start from: `configured(src, dst)` gives the pair's
        (rate_bps, cut) in force now; `t0_ns` is the run's t=0; `allowed(src,
        dst)` the rate its class holds now (the path's, or the share the
        sharing loop narrowed it to; None: unlimited), kept per window."""
        self._configured = configured
        self.t0_ns = t0_ns
        if allowed is not None:
            self._allowed = allowed

    def mark(self, src: str, dst: str, rate_bps: int | None, cut: bool) -> None:
        """The pair's path changed now: the current segment ends."""
        with self._segments_lock:
            segments = self._segments.get((src, dst))
            if segments is None:
                return  # no traffic yet: its first segment starts at its first sample
            now = time.monotonic_ns()
            segments[-1].end_ns = now
            segments.append(Segment(now, rate_bps, cut))

    def mark_paths(
        self, src: str, dsts: Iterable[str], configured: Callable[[str, str], tuple[int | None, bool]]
    ) -> None:
        """The paths from src to dsts changed now: the segments of those
        that carried traffic end, and the next start with what
        `configured(src, dst)` gives.  A link change names 80,000 pairs at
        400 instances; only those with traffic are looked at."""
        with self._segments_lock:
            marked = self._segmented.get(src, set()).intersection(dsts)
        for dst in marked:
            self.mark(src, dst, *configured(src, dst))

    def start(self) -> None:
        if self._factory is not None:
            self._thread = threading.Thread(target=self._attach_all, name="counters", daemon=True)
            self._thread.start()

    def _attach_all(self) -> None:
        with self._clock.stage("counters"):
            self._attach_each()

    def _attach_each(self) -> None:
        if self._factory is None:
            return
        for net in self._plan.instances:
            if self._closing.is_set():
                return
            try:
                with self._clock.item("counters"):
                    counters = self._factory(net.ifname, net.netns).attach()
            except CollapsarError as error:
                self._say(f"warning: no throughput measurements: {error}")
                return
            with self._lock:
                if self._closing.is_set():
                    counters.detach()
                    return
                self._counters[net.instance] = counters
        self._say(f"counters attached on {len(self._counters)} instances")

    def wait_attached(self) -> None:
        """Until every instance's counters are attached (or attaching failed)."""
        if self._thread is not None:
            self._thread.join()

    @property
    def attached(self) -> int:
        with self._lock:
            return len(self._counters)

    def sample(self) -> None:
        with self._lock:
            counters_now = list(self._counters.items())
        now = time.monotonic_ns()
        for src, counters in counters_now:
            for ip, counter in counters.read().items():
                dst = self._instance_of.get(ip)
                if dst is None:
                    continue  # traffic to outside the run (there should be none)
                key = (src, dst)
                history = self._history.get(key)
                if history is None:
                    history = self._history[key] = deque()
                    self._new_pairs.append(key)
                history.append((now, counter.wire_bytes))
                while len(history) > 2 and now - history[1][0] >= WINDOW_NS:
                    history.popleft()
                first_ns, first_bytes = history[0]
                span_ns = now - first_ns
                rate = int((counter.wire_bytes - first_bytes) * 8e9 / span_ns) if span_ns > 0 else 0
                segments = self._segments.get(key)
                if segments is None:
                    configured, cut = self._configured(src, dst)
                    with self._segments_lock:
                        segments = self._segments[key] = deque(
                            [Segment(self.t0_ns, configured, cut)], maxlen=SEGMENTS_KEPT
                        )
                        self._segmented.setdefault(src, set()).add(dst)
                if span_ns >= WINDOW_NS // 2 and rate > 0:
                    # A full-ish window while the flow is sending: a candidate
                    # for the flow's typical rate (see flows()).
                    self._active.setdefault(key, deque(maxlen=ACTIVE_SAMPLES)).append(rate)
                    if first_ns >= segments[-1].start_ns:
                        # Windows that catch a flow starting or ending are
                        # part idle: they count only for flows too slow to
                        # send in every period (see Segment.summary).
                        throughout = history[1][1] > first_bytes and history[-1][1] > history[-2][1]
                        window = (rate, self._allowed(src, dst))
                        (segments[-1].rates if throughout else segments[-1].partial).append(window)
                self._flows[key] = {
                    "src": src,
                    "dst": dst,
                    "bytes": counter.bytes,
                    "packets": counter.packets,
                    "wire_bytes": counter.wire_bytes,
                    "rate_bps": rate,
                }

    def rates_now(self) -> dict[tuple[str, str], int]:
        """(src, dst) -> its rate over the last window (about 1 s), bits per second."""
        return {key: flow["rate_bps"] for key, flow in self._flows.items()}

    def new_pairs(self) -> list[tuple[str, str]]:
        """The (src, dst) pairs whose first bytes the samples since the last
        call saw, in the order they were seen."""
        pairs, self._new_pairs = self._new_pairs, []
        return pairs

    def flows(self) -> list[dict]:
        """Each flow's counters, its rate over the last window, and its
        median windowed rate while it was sending: the counters see traffic
        as offered, before the shaper, so a TCP flow's first burst into the
        queue overshoots; the median is what the flow settled at."""
        result = []
        with self._segments_lock:
            segments_of = {key: tuple(self._segments.get(key, ())) for key in self._flows}
        for key in sorted(segments_of):
            active = sorted(self._active.get(key, ()))
            median = active[len(active) // 2] if active else 0
            segments = [seg.summary(self.t0_ns) for seg in segments_of[key]]
            result.append({**self._flows[key], "median_rate_bps": median, "segments": segments})
        return result

    def close(self) -> None:
        self._closing.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for counters in self._counters.values():
                try:
                    counters.detach()
                except CollapsarError:
                    pass  # the namespace is about to go, and the filter with it
            self._counters.clear()
