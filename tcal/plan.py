"""The tc plan: from destinations to the exact tree, with no kernel involved.

Everything numeric about the tree is decided here, so it can be unit tested
without root and printed by `--dry-run`; `collapsar.tcal.tree` only encodes
these numbers into netlink messages.

The tree on one instance's egress interface:

    1:    htb root, default class 1:1
    1:1   default class: unlimited, prio 0 (Collapsar's own traffic, never shaped)
    1:2   blackhole class, leaf 2: drops everything (cut and removed paths)
    1:N   one class per destination (N >= 0x10), rate = ceil = path rate,
          leaf N: netem (delay, jitter, loss, burst loss, reordering,
          corruption) and under it, as its child, the queue 8000+N: (a
          pfifo, after the delay); without netem, a pfifo.  Duplication is not the
          leaf's (a duplicating netem refuses to share a tree with other
          netems): an eBPF program at clsact egress copies the packet
          (collapsar.tcal.duplicate) and the copy takes the same class and leaf
    u32   800:: (root) -> ht 1: hashed on the third octet of the destination
          -> ht 0x100+octet3: hashed on the fourth octet -> one node per
          destination matching its full address -> class 1:N

Why these numbers (measured on this project's hosts, see bench/tcal_bench.py):
- wire overhead: htb charges only the layer-2 frame (1514 bytes for a 1500 MTU),
  so TCP goodput is 1448/1514 = 95.6% of the rate, while real Ethernet also
  sends preamble+SFD (8), FCS (4) and the inter-frame gap (12): 1448/1538 =
  94.2%.  tc_ratespec.overhead would add those 24 bytes per *skb*, but TCP
  hands the qdisc GSO super-packets of up to ~44 frames (the kernel keeps GSO on
  for TCP even with the device's gso/tso off; only gso_max_segs=1 stops it, and
  that caps a veth at ~570 Mbit/s on these 2-core hosts).  Measured: overhead
  24 leaves TCP at 95.5%.  So we charge the overhead as a rate: the class runs
  at rate x frame/(frame + 24), which gives full-sized frames exactly the wire
  time of a real link whatever the GSO batching (measured 94.1% at 100 Mbit/s,
  94.1% at 1 Gbit/s), and mpu 83 makes a minimum frame cost its 84 wire bytes.
  Mid-sized frames are charged slightly less than on a real link (a 200-byte
  frame: 203 instead of 224 wire bytes); bulk goodput is what users measure.
- burst: the larger of two full frames and BURST_TIME_US (20 ms) of traffic at
  the rate.  A burst of a whole second lets ~18 Mbit/s through a 10 Mbit/s
  class for the first second; 20 ms lets 20 ms of traffic through early, once.
  Smaller is not better: htb keeps at most one burst of tokens, so whenever the
  dequeue runs late by more than the burst (softirq starved on a busy host)
  the difference is lost for good.  Measured on a 2-core host at load ~10:
  5 ms lost 15-19% of goodput at 50 Mbit/s and 15% at 1 Gbit/s in some runs,
  20 ms at most 3.6%; on an idle host both are within 0.2%.
- GSO: TCP hands htb super-packets of up to 64 KB (44 frames), and htb releases
  each as one unit: at 1 Mbit/s the receiver got 64 KB every 0.53 s (per-second
  goodput swinging between 0.5 and 1.04 Mbit/s).  Turning GSO off in the device
  features does not stop TCP (the kernel keeps GSO on for it); the device's
  gso_max_segs does.  We lower it, only when some path needs it, so that one
  super-packet lasts no longer than one burst at the slowest path's rate (2
  frames at 1 Mbit/s: per-second goodput then within 0.93-0.95 Mbit/s).  To
  1 only when every path of the interface is at most SINGLE_FRAME_MAX_BPS:
  a queue then counts frames, as a link's does (a queue counts packets, and
  TCP at a few Mbit/s hands it 2-frame super-packets), at a cost the slow
  paths can afford; beside a fast path, 2 at least: a segment per skb caps a
  veth near 570 Mbit/s on these 2-core hosts (the VM tier's emulated CPU
  carries 25 Mbit/s of single frames).  Sockets read the limit when they
  connect, so it follows the setup rates, not the sharing loop's, and it only
  lowers.
- the leaf: netem holds each packet for its delay, then hands it to its child,
  a pfifo of the path's queue, from which htb takes it at the class's rate.
  The queue comes after the delay so that its drops are the wire's: netem
  moves a packet into the queue when its delay is over, in a dequeue, long
  after the sender's send returned, and a full queue drops it there, where
  the sender learns of it as from a router (duplicate ACKs, a
  retransmission).  A queue in front of the delay (netem's own limit, as
  Kollaps had it) drops in the sender's enqueue: the sender's stack gets
  NET_XMIT_DROP back, TCP takes that for local congestion (CWR, and it sends
  the same segment again later: the egress counters count every attempt),
  and never sees a loss.  One CUBIC flow at 2 Mbit/s through 50 ms with a
  10-packet queue: 54 drops and 54 retransmissions in 30 s with the queue
  after the delay, 53 and 53 through a router with the same queue, 28 and
  0 with the queue in front (bench/local_drop_bench.py).  netem's own limit then bounds only
  the delay line: twice the packets in flight along it at the path's rate
  (rate x delay, Little's law: jitter does not change the mean; twice, for
  slow start's bursts at twice the bottleneck's rate) plus the queue, so
  that only a flood past twice the rate drops there.
- the queue: a path's `queue` (collapsar.impairments), else the path's
  round trip (2 x delay) at its rate, the bandwidth-delay product real
  links are given (and the hop-by-hop reference of the tests), at least
  one burst (BURST_TIME_US: a dequeue that runs that late must not drop)
  and DEFAULT_QUEUE_FLOOR_PKTS.  Not netem's 1000 packets, which Kollaps
  kept: netem orphans what it delays, so TCP's small-queue limit no longer
  bounds a flow's backlog, and a CUBIC flow filled its class with seconds
  of queue at its share (1022 packets: 7 s at 1.76 Mbit/s), stalled for
  seconds when a join cut its share and got 8.6% less than it; with the
  round trip it gets its share within 1% (docs/fidelity.md "Long flows").
  A path without a rate keeps the old sizing for both: the delay line
  (rate x (delay + 4 jitter)) at LIMIT_RATE_CAP_BPS with 1.5 x headroom
  plus 1000 packets.  Without netem (no delay) the leaf is that queue alone.
  A class's sizing only grows while it carries traffic (the sharing loop's
  rates come and go under a running flow: `changed_leaf`); a cut class
  takes the next path's own sizing (TcTree._unused): an instance that
  joins later has its classes made at t=0 only to be cut, without a rate,
  and grown from those its flows had the unlimited queue above.
- jitter in order: netem's rate mode makes each packet leave no earlier
  than the one before it; at IN_ORDER_RATE_BPS it adds 0.12 us per frame.
"""

from __future__ import annotations

import enum
import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from collapsar.errors import CollapsarError
from collapsar.impairments import NO_EXTRAS, Extras, LossModel, Queue
from collapsar.model import DISTRIBUTIONS, SHAPING_FIELDS, JitterDistribution, LinkProps, ShapingRules
from collapsar.tcal.layout import (
    LAST_DEST_MINOR,
    ROOT_MAJOR,
    MinorAllocator,
    U32Layout,
    U32Slot,
    classid,
    format_handle,
)
from collapsar.units import format_duration_us, format_rate_bps

ETH_HEADER_BYTES = 14
# Preamble + SFD (8) + FCS (4) + inter-frame gap (12): what a real link sends
# beyond the frame htb sees (skb->len has no FCS).
ETH_WIRE_OVERHEAD_BYTES = 24
# Minimum Ethernet frame (64 with FCS) + preamble/SFD + gap.
ETH_MIN_WIRE_BYTES = 84

# "Unlimited" still needs an htb rate: 100 Gbit/s is far above what a veth pair
# or a NIC moves per instance, so the class never throttles, and keeping a real
# class means a later rate change is an in-place change like any other.
UNLIMITED_RATE_BPS = 100 * 10**9
# An unlimited path's delay line is sized as if it ran at 10 Gbit/s; sizing it
# for 100 Gbit/s would allow millions of queued packets.
LIMIT_RATE_CAP_BPS = 10 * 10**9

BURST_TIME_US = 20_000
MIN_BURST_FRAMES = 2
MAX_BURST_S = 200
MIN_GSO_SEGS = 2
SINGLE_FRAME_MAX_BPS = 20_000_000
GSO_MAX_BYTES = 65536  # the largest super-packet (gso_max_size)
LIMIT_HEADROOM = 1.5
BASE_QUEUE_PKTS = 1000
DEFAULT_QUEUE_FLOOR_PKTS = 10
MAX_LIMIT_PKTS = 0xFFFF_FFFF
JITTER_SPAN = 4  # netem's tables reach 4 standard deviations (s16 / 8192)
IN_ORDER_RATE_BPS = 100 * 10**9  # netem's rate for jitter in order: far above any path

PSCHED_TICK_NS = 64  # PSCHED_SHIFT = 6: htb's buffer is in 64 ns ticks
TC_LINKLAYER_ETHERNET = 1
DEST_PRIO = 1
DEFAULT_PRIO = 0  # control traffic goes before shaped traffic


@dataclass(frozen=True)
class Shaping(ShapingRules):
    """What one destination's path should look like, as seen from the sender:
    the shaping record (collapsar.model.LinkProps, SHAPING_FIELDS) for one
    address, checked as the kernel will need it."""

    dst_ip: str
    rate_bps: int | None
    delay_us: int = 0
    jitter_us: int = 0
    distribution: JitterDistribution = "normal"
    loss_ratio: float = 0.0
    extras: Extras = NO_EXTRAS

    def __post_init__(self) -> None:
        where = f"destination {self.dst_ip!r}"
        try:
            ipaddress.IPv4Address(self.dst_ip)
        except ValueError:
            raise CollapsarError(f"{where}: expected an IPv4 address") from None
        check_rate(where, self.rate_bps)
        for name in ("delay_us", "jitter_us"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise CollapsarError(f"{where}: {name} must be an integer >= 0, got {value!r}")
        if self.jitter_lacks_delay:
            raise CollapsarError(f"{where}: jitter needs a delay (jitter_us={self.jitter_us}, delay_us=0)")
        if self.distribution not in DISTRIBUTIONS:
            raise CollapsarError(
                f"{where}: distribution must be one of {', '.join(DISTRIBUTIONS)}, got {self.distribution!r}"
            )
        if not 0.0 <= self.loss_ratio <= 1.0:
            raise CollapsarError(f"{where}: loss_ratio must lie in [0, 1], got {self.loss_ratio!r}")

    @classmethod
    def of(cls, dst_ip: str, props: LinkProps) -> Shaping:
        """The record `props` for the address `dst_ip`."""
        return cls(dst_ip, **{name: getattr(props, name) for name in SHAPING_FIELDS})

    @property
    def props(self) -> LinkProps:
        """The shaping record, without the address."""
        return LinkProps(**{name: getattr(self, name) for name in SHAPING_FIELDS})


def check_rate(where: str, rate_bps: object) -> None:
    """An htb rate: an integer of at least one byte per second, or None (unlimited)."""
    if rate_bps is not None and (not isinstance(rate_bps, int) or rate_bps < 8):
        raise CollapsarError(f"{where}: rate_bps must be an integer >= 8 or None, got {rate_bps!r}")


class HtbParams(NamedTuple):
    """One htb class, in the kernel's units (bytes per second, 64 ns ticks).
    (A NamedTuple, like LeafParams: the sharing loop makes hundreds per period.)"""

    rate_bytes_ps: int
    burst_bytes: int
    buffer_ticks: int
    quantum_bytes: int
    overhead_bytes: int
    mpu_bytes: int
    prio: int


class LeafParams(NamedTuple):
    """The qdisc under a destination's class."""

    kind: str  # "netem" or "pfifo"
    limit_pkts: int
    delay_us: int = 0
    jitter_us: int = 0
    distribution: JitterDistribution = "normal"
    loss_ratio: float = 0.0
    loss_model: LossModel | None = None  # None: Bernoulli at loss_ratio
    reorder_ratio: float = 0.0
    duplicate_ratio: float = 0.0
    corrupt_ratio: float = 0.0
    in_order: bool = False  # only with jitter
    queue_pkts: int = 0  # netem's child pfifo, the queue after the delay (0: none, as for the blackhole)


def frame_wire_bytes(mtu_bytes: int, wire_overhead: bool) -> int:
    return mtu_bytes + ETH_HEADER_BYTES + (ETH_WIRE_OVERHEAD_BYTES if wire_overhead else 0)


def htb_params(rate_bps: int | None, *, wire_overhead: bool, mtu_bytes: int = 1500, prio: int = DEST_PRIO) -> HtbParams:
    """rate = ceil, burst = cburst; rate_bps None means UNLIMITED_RATE_BPS.
    (`HtbCalculator` does the work; a tree keeps one per interface.)"""
    params = HtbCalculator(wire_overhead=wire_overhead, mtu_bytes=mtu_bytes)(rate_bps)
    return params if prio == DEST_PRIO else params._replace(prio=prio)


def default_queue_pkts(rate_bps: int, delay_us: int, mtu_bytes: int = 1500) -> int:
    """The queue of a path with a rate and no `queue`: its round trip (twice
    its delay), at least one burst (BURST_TIME_US), of full frames at its
    rate, and at least DEFAULT_QUEUE_FLOOR_PKTS (see the module docstring)."""
    span = Queue(time_us=max(2 * delay_us, BURST_TIME_US))
    return max(DEFAULT_QUEUE_FLOOR_PKTS, span.packets_at(rate_bps, mtu_bytes + ETH_HEADER_BYTES))


class LeafSizes(NamedTuple):
    limit_pkts: int  # netem's own limit: twice its delay line, and the queue
    queue_pkts: int  # the queue after the delay (netem's child), or a pfifo leaf's limit


def leaf_sizes(
    rate_bps: int | None, delay_us: int, jitter_us: int, mtu_bytes: int = 1500, queue: Queue | None = None
) -> LeafSizes:
    """The leaf's sizes (see the module docstring): the queue (`queue`, or for
    a path with a rate default_queue_pkts) and netem's limit, twice the mean
    delay line plus the queue; a path without a rate, the delay line with
    headroom plus a base queue for both."""
    rate = min(rate_bps or LIMIT_RATE_CAP_BPS, LIMIT_RATE_CAP_BPS)
    frame = mtu_bytes + ETH_HEADER_BYTES
    if queue is None and rate_bps is None:
        line_bytes = rate / 8 * (delay_us + JITTER_SPAN * jitter_us) / 1e6
        limit = backlog = BASE_QUEUE_PKTS + math.ceil(LIMIT_HEADROOM * line_bytes / frame)
    else:
        backlog = queue.packets_at(rate, frame) if queue is not None else default_queue_pkts(rate, delay_us, mtu_bytes)
        limit = 2 * math.ceil(rate / 8 * delay_us / 1e6 / frame) + backlog
    # netem's limit is a u32; a path of several hour-long links would ask for
    # more, and four billion packets is no limit at all for any host's memory.
    return LeafSizes(min(limit, MAX_LIMIT_PKTS), min(backlog, MAX_LIMIT_PKTS))


class HtbCalculator:
    """The htb numbers of a class on one interface, with that interface's
    constants worked out once: the sharing loop computes hundreds of
    classes per 50 ms period.

    With `wire_overhead` the htb rate is the frame share of the wire rate (see
    the module docstring): rate x (mtu + 14) / (mtu + 38).  Integer
    arithmetic throughout but for that share, so the burst and the buffer
    are rounded up exactly."""

    __slots__ = ("share", "frame", "mpu", "min_burst")

    def __init__(self, *, wire_overhead: bool, mtu_bytes: int = 1500):
        self.frame = mtu_bytes + ETH_HEADER_BYTES
        self.share = self.frame / (self.frame + ETH_WIRE_OVERHEAD_BYTES) if wire_overhead else 1.0
        self.mpu = math.ceil(ETH_MIN_WIRE_BYTES * self.share) if wire_overhead else 0
        self.min_burst = MIN_BURST_FRAMES * self.frame

    def __call__(self, rate_bps: int | None) -> HtbParams:
        rate_bytes_ps = round((rate_bps or UNLIMITED_RATE_BPS) * self.share / 8) or 1
        burst = max(self.min_burst, -(-rate_bytes_ps * BURST_TIME_US // 1_000_000))
        # htb's buffer is a u32 of 64 ns ticks (274 s): below ~100 bit/s two frames
        # take longer than that, so the burst shrinks to what fits (htb still sends
        # the frame; its tokens just go negative for longer).
        burst = min(burst, rate_bytes_ps * MAX_BURST_S)
        ticks = -(-burst * (10**9 // PSCHED_TICK_NS) // rate_bytes_ps)
        return HtbParams(rate_bytes_ps, burst, ticks, self.frame, 0, self.mpu, DEST_PRIO)


def gso_max_segs(rates_bps: list[int | None], mtu_bytes: int = 1500) -> int | None:
    """The interface's gso_max_segs: 1 when every path is at most
    SINGLE_FRAME_MAX_BPS, else so that a super-packet lasts at most one burst
    (BURST_TIME_US) at the slowest path; None when no path is slow enough to care."""
    limited = [r for r in rates_bps if r is not None]
    if not limited:
        return None
    if len(limited) == len(rates_bps) and max(limited) <= SINGLE_FRAME_MAX_BPS:
        return 1
    frame = mtu_bytes + ETH_HEADER_BYTES
    segs = int(min(limited) / 8 * BURST_TIME_US / 1e6 // frame)
    if segs >= GSO_MAX_BYTES // frame:
        return None
    return max(MIN_GSO_SEGS, segs)


def gso_rates_seen(rates_bps: list[int | None]) -> list[int | None]:
    """All gso_max_segs reads of `rates_bps`: the slowest, the fastest, and
    whether one is unlimited (a tree keeps this of every rate it has seen,
    not one entry per path and join)."""
    limited = [r for r in rates_bps if r is not None]
    return ([min(limited), max(limited)] if limited else []) + ([None] if None in rates_bps else [])


class _Same(enum.Enum):
    """A default that None cannot be (None means unlimited): size for the path's own rate."""

    SAME = enum.auto()


_SAME = _Same.SAME


def leaf_params(
    shaping: Shaping, *, netem: bool, mtu_bytes: int = 1500, limit_rate_bps: int | None | _Same = _SAME
) -> LeafParams:
    """The leaf for `shaping`; `limit_rate_bps` sizes the queue for another rate
    than the path's current one (None: unlimited) so that a queue sized for a
    fast path keeps its room when the sharing loop slows the path down."""
    sizing_rate = shaping.rate_bps if limit_rate_bps is _SAME else limit_rate_bps
    extras = shaping.extras
    sizes = leaf_sizes(sizing_rate, shaping.delay_us, shaping.jitter_us, mtu_bytes, extras.queue)
    if not netem:
        # Duplication is the eBPF duplicator's, not netem's: a pfifo leaf can have it.
        if shaping.needs_netem:
            raise CollapsarError(
                f"destination {shaping.dst_ip}: delay, jitter and loss (burst loss, reordering "
                f"and corruption too) need sch_netem, but this tree was built without netem "
                f"(delay_us={shaping.delay_us}, jitter_us={shaping.jitter_us}, loss_ratio={shaping.loss_ratio}, "
                f"burst loss {'on' if extras.loss_model else 'off'}, reorder_ratio={extras.reorder_ratio}, "
                f"corrupt_ratio={extras.corrupt_ratio})"
            )
        return LeafParams("pfifo", sizes.queue_pkts, duplicate_ratio=extras.duplicate_ratio)
    return LeafParams(
        "netem",
        sizes.limit_pkts,
        shaping.delay_us,
        shaping.jitter_us,
        shaping.distribution,
        shaping.loss_ratio,
        extras.loss_model,
        extras.reorder_ratio,
        extras.duplicate_ratio,
        extras.corrupt_ratio,
        bool(extras.in_order and shaping.jitter_us),
        sizes.queue_pkts,
    )


def changed_leaf(leaf: LeafParams, new: Shaping, before: LeafParams, was: Shaping) -> LeafParams:
    """`leaf` (for `new`) replacing `before` (for `was`): the default sizing
    only grows (the sharing loop's rates come and go); a queue the user sets is exact."""
    if new.extras.queue is None and was.extras.queue is None:
        return leaf._replace(
            limit_pkts=max(leaf.limit_pkts, before.limit_pkts), queue_pkts=max(leaf.queue_pkts, before.queue_pkts)
        )
    return leaf


@dataclass(frozen=True)
class DestPlan:
    shaping: Shaping
    minor: int
    htb: HtbParams
    leaf: LeafParams
    slot: U32Slot

    @property
    def classid(self) -> int:
        return classid(ROOT_MAJOR, self.minor)

    @property
    def leaf_handle(self) -> int:
        return classid(self.minor, 0)


@dataclass
class TreePlan:
    wire_overhead: bool
    netem: bool
    mtu_bytes: int
    default_htb: HtbParams
    blackhole_leaf: LeafParams
    htb: HtbCalculator  # this interface's: the tree computes every later class with it
    dests: list[DestPlan] = field(default_factory=list)
    last_minor: int = LAST_DEST_MINOR  # the highest a shaped class takes (traffic classes keep the rest)

    def describe(self, classes: Sequence[str] = ()) -> list[str]:
        """`classes`: the traffic classes' lines (collapsar.tcal.classes), if
        the tree has them: every shaped class then has a leaf per class."""
        lines = [
            f"qdisc 1: root htb default 1:1 (wire overhead {'on' if self.wire_overhead else 'off'}, "
            f"mtu {self.mtu_bytes})",
            f"class 1:1 default (unshaped): {describe_htb(self.default_htb, None)}",
            f"class 1:2 blackhole: leaf 2: {describe_leaf(self.blackhole_leaf)} (cut and removed paths)",
            "filter u32 ht 800: match all, hash dst octet 3 -> ht 1: (256 buckets)",
        ]
        lines += classes
        for d in self.dests:
            s = d.slot
            lines.append(
                f"class {format_handle(d.classid)} -> {d.shaping.dst_ip}: "
                f"{describe_htb(d.htb, d.shaping.rate_bps)}; "
                + (
                    f"leaf {d.minor:x}: {describe_leaf(d.leaf)}"
                    if not classes
                    else f"a leaf per traffic class: {describe_leaf(d.leaf)}"
                )
            )
            lines.append(
                f"  filter u32 ht 1: bucket {s.level1_bucket} -> ht {s.level2_htid:x}: "
                f"bucket {s.level2_bucket} node {s.node}: dst {d.shaping.dst_ip}/32 "
                f"-> {format_handle(d.classid)}"
            )
        return lines


def describe_htb(p: HtbParams, rate_bps: int | None) -> str:
    rate = "unlimited" if rate_bps is None else format_rate_bps(rate_bps)
    return (
        f"rate=ceil {rate} ({p.rate_bytes_ps} B/s), burst=cburst {p.burst_bytes} B "
        f"({p.buffer_ticks} ticks), quantum {p.quantum_bytes} B, overhead {p.overhead_bytes} B, "
        f"mpu {p.mpu_bytes} B, prio {p.prio}"
    )


def describe_leaf(p: LeafParams) -> str:
    duplicate = ""
    if p.duplicate_ratio:  # not the leaf's own: see the module's text
        duplicate = f"; duplicate {p.duplicate_ratio:.6g} (eBPF copy at clsact egress, shaped by this class)"
    if p.kind == "pfifo":
        return f"pfifo limit {p.limit_pkts}{duplicate}"
    parts = [f"netem delay {format_duration_us(p.delay_us)}"]
    if p.jitter_us:
        parts.append(f"jitter {format_duration_us(p.jitter_us)} {p.distribution}{' in order' if p.in_order else ''}")
    model = p.loss_model
    if model is None:
        parts.append(f"loss {p.loss_ratio:.6g}")
    else:
        parts.append(
            f"loss gemodel p {model.to_bad:.6g} r {model.to_good:.6g} 1-h {model.loss_in_bad:.6g} "
            f"1-k {model.loss_in_good:.6g} (rate {p.loss_ratio:.6g}, mean burst {model.mean_burst():.4g})"
        )
    for name, value in (("reorder", p.reorder_ratio), ("corrupt", p.corrupt_ratio)):
        if value:
            parts.append(f"{name} {value:.6g}")
    parts.append(f"limit {p.limit_pkts}")
    if p.queue_pkts:
        parts.append(f"then queue pfifo limit {p.queue_pkts}")
    return " ".join(parts) + duplicate


def blackhole_leaf(netem: bool) -> LeafParams:
    """With netem, a blackhole is loss 100% (silent, like a cut cable); without it, a
    pfifo of limit 0 (the sender sees a local drop, NET_XMIT_DROP)."""
    return LeafParams("netem", BASE_QUEUE_PKTS, loss_ratio=1.0) if netem else LeafParams("pfifo", 0)


def check_unique(shapings: Sequence[Shaping]) -> None:
    """One record per destination address in a tree."""
    seen: set[str] = set()
    for s in shapings:
        if s.dst_ip in seen:
            raise CollapsarError(f"destination {s.dst_ip} appears twice in one tree")
        seen.add(s.dst_ip)


def plan_tree(
    shapings: Sequence[Shaping],
    *,
    wire_overhead: bool = True,
    netem: bool = True,
    mtu_bytes: int = 1500,
    last_minor: int = LAST_DEST_MINOR,
) -> TreePlan:
    """`last_minor`: the highest minor a destination's class may take
    (traffic classes, collapsar.tcal.classes, keep the minors above it)."""
    check_unique(shapings)
    htb = HtbCalculator(wire_overhead=wire_overhead, mtu_bytes=mtu_bytes)
    plan = TreePlan(
        wire_overhead,
        netem,
        mtu_bytes,
        default_htb=htb(None)._replace(prio=DEFAULT_PRIO),
        blackhole_leaf=blackhole_leaf(netem),
        htb=htb,
    )
    plan.last_minor = last_minor
    layout, minors = U32Layout(), MinorAllocator(last_minor)
    for s in shapings:
        plan.dests.append(
            DestPlan(
                s,
                minors.take(),
                htb(s.rate_bps),
                leaf_params(s, netem=netem, mtu_bytes=mtu_bytes),
                layout.place(s.dst_ip),
            )
        )
    return plan
