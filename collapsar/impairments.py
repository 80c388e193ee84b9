"""What a link does to packets beyond delay, jitter, Bernoulli loss and rate,
and how each property composes along a collapsed path.

A path is shaped by one netem at its source, which holds one loss model, one
reordering, duplication and corruption probability, one delay distribution
and one queue.  So each property here has a rule that folds the links of a
path into that one netem; docs/language.md states the same rules for users.

Loss.  A link loses packets independently (Bernoulli: `loss: 1%`) or in
bursts, after a Gilbert-Elliott chain (`LossModel`): two states, good and
bad, each with its own loss probability; before each packet the chain moves
good -> bad with probability `to_bad` and bad -> good with `to_good`, and
the packet is lost with the probability of the state it finds (netem's
`gemodel p r 1-h 1-k`, whose transition comes after the packet's draw; the
stationary figures are the same).  A loss rate with a mean burst length, or
with a correlation, is the simple Gilbert chain (loss 100% in bad, 0% in
good) with that stationary rate and that mean run of consecutive losses;
the correlation is the lag-1 correlation of the loss indicator.  (netem's own
`loss P CORR` is not used: its correlated generator mixes uniform draws, so
the loss rate it gives is not P.)

Along a path links lose packets independently of each other, so:
- the path's loss rate is 1 - prod(1 - rate_i), for any mix of models;
- no bursty link: Bernoulli at that rate;
- one bursty link: its chain, with every other link's survival folded into
  each state's loss probability: exact for the loss process, except that a
  real link's chain advances only with the packets that reach it, where the
  path's advances with every packet sent (the burst length differs by at
  most the loss rate before the bursty link, relatively);
- several bursty links: the simple Gilbert chain with the path's exact loss
  rate and the exact probability that a loss follows a loss (from each
  link's probability of two packets in a row both surviving, a product
  along the path), hence its exact mean burst length; longer-range structure
  (the distribution of burst lengths) is not kept.

Reordering (`reorder`): netem sends a packet chosen with this probability at
once, without the delay, ahead of the delayed packets; along a path a packet
is reordered if any link reorders it: 1 - prod(1 - r_i), and it skips the
whole path's delay.  Corruption (`corrupt`, one flipped bit in the packet): 1
- prod(1 - c_i).  Duplication (`duplicate`): each link may copy a packet
and later links may copy the copies; one netem makes at most one copy, so
the path duplicates with the probability that gives the same mean number of
packets delivered, prod(1 + d_i) - 1, capped at 100%.

Jitter in order (`in_order`): netem draws each packet's delay on its own,
so a packet drawn a shorter delay overtakes the ones before it, which real
links rarely do.  In order, a packet leaves no earlier than the packet
before it (netem's rate mode, at a rate far above the path's: what it adds
per packet is the wire time of 100 Gbit/s); the delay distribution is kept
but for that wait behind a slower predecessor.  A path keeps order when
every link with jitter on it does.

Background traffic (`background`) is a link's own: it takes its share of
that link in the sharing model (`Background`), and a path has none.

Queue (`queue`): the drop-tail queue in front of a link's rate, in packets
or as a time at the link's rate (full 1514-byte frames).  A path's queue is
its bottleneck's (the link with the lowest rate, the first on a tie), where a
real path's queue builds, in packets at that link's configured rate (a
share the sharing model gives a flow does not shrink it); without a `queue`
there, the default sizing holds.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

# Duplication above this is not one copy per packet: the path's is capped here.
MAX_DUPLICATE = 1.0
# A queue given as a time holds that long of full frames (1500-byte MTU).
FRAME_BYTES = 1514


@dataclass(frozen=True)
class LossModel:
    """A Gilbert-Elliott loss chain, probabilities per packet."""

    to_bad: float  # good -> bad (netem's p)
    to_good: float  # bad -> good (netem's r)
    loss_in_bad: float = 1.0  # netem's 1-h
    loss_in_good: float = 0.0  # netem's 1-k

    @classmethod
    def bursts(cls, rate: float, burst: float) -> LossModel:
        """The simple Gilbert chain losing `rate` of the packets in runs of
        `burst` packets on average (`burst` >= 1 and >= rate / (1 - rate))."""
        to_good = 1.0 / burst
        return cls(rate * to_good / (1.0 - rate), to_good)

    @classmethod
    def correlated(cls, rate: float, correlation: float) -> LossModel:
        """The simple Gilbert chain losing `rate` of the packets, whose loss
        indicator has lag-1 correlation `correlation` (in [0, 1))."""
        return cls(rate * (1.0 - correlation), (1.0 - rate) * (1.0 - correlation))

    @property
    def bad_share(self) -> float:
        """The stationary probability of the bad state."""
        moving = self.to_bad + self.to_good
        return self.to_bad / moving if moving else 0.0

    @property
    def rate(self) -> float:
        """The stationary loss rate."""
        bad = self.bad_share
        return (1.0 - bad) * self.loss_in_good + bad * self.loss_in_bad

    def pair_keep(self) -> float:
        """The stationary probability that two packets in a row both survive."""
        bad = self.bad_share
        keep_good, keep_bad = 1.0 - self.loss_in_good, 1.0 - self.loss_in_bad
        from_good = (1.0 - self.to_bad) * keep_good + self.to_bad * keep_bad
        from_bad = self.to_good * keep_good + (1.0 - self.to_good) * keep_bad
        return (1.0 - bad) * keep_good * from_good + bad * keep_bad * from_bad

    def mean_burst(self) -> float:
        """The mean number of consecutive packets lost, in a run of losses."""
        return burst_of(self.rate, 1.0 - 2.0 * (1.0 - self.rate) + self.pair_keep())

    def thinned(self, keep: float) -> LossModel:
        """This chain with an independent survival `keep` folded into each state."""
        return LossModel(
            self.to_bad,
            self.to_good,
            1.0 - (1.0 - self.loss_in_bad) * keep,
            1.0 - (1.0 - self.loss_in_good) * keep,
        )


def burst_of(rate: float, both_lost: float) -> float:
    """The mean loss run of a stationary process losing `rate` of the packets,
    two in a row with probability `both_lost`: runs end as often as a loss
    is followed by a delivery, rate - both_lost."""
    ends = rate - both_lost
    return rate / ends if ends > 0 else math.inf


def link_loss(rate: float, model: LossModel | None) -> tuple[float, float]:
    """(survival, survival of two in a row) of one link."""
    if model is None:
        return 1.0 - rate, (1.0 - rate) ** 2
    return 1.0 - model.rate, model.pair_keep()


def compose_loss(links: Sequence[tuple[float, LossModel | None]]) -> tuple[float, LossModel | None]:
    """A path's (loss rate, chain or None for Bernoulli) from its links' (rate, chain)."""
    keep = pair_keep = 1.0
    bursty = []
    plain_keep = 1.0
    for rate, model in links:
        one, two = link_loss(rate, model)
        keep, pair_keep = keep * one, pair_keep * two
        if model is None:
            plain_keep *= one
        else:
            bursty.append(model)
    loss = round(1.0 - keep, 12)
    if not bursty:
        return loss, None
    if len(bursty) == 1:
        return loss, bursty[0].thinned(plain_keep)
    if keep <= 0.0:
        return 1.0, None
    both_lost = 1.0 - 2.0 * keep + pair_keep
    to_good = 1.0 - both_lost / (1.0 - keep)
    return loss, LossModel(min(1.0, (1.0 - keep) * to_good / keep), to_good)


def compose_reorder(ratios: Sequence[float]) -> float:
    return _any_of(ratios)


def compose_corrupt(ratios: Sequence[float]) -> float:
    return _any_of(ratios)


def compose_duplicate(ratios: Sequence[float]) -> float:
    copies = 1.0
    for ratio in ratios:
        copies *= 1.0 + ratio
    return min(MAX_DUPLICATE, round(copies - 1.0, 12))


def _any_of(ratios: Sequence[float]) -> float:
    keep = 1.0
    for ratio in ratios:
        keep *= 1.0 - ratio
    return round(1.0 - keep, 12)


@dataclass(frozen=True)
class Queue:
    """A drop-tail queue: `packets`, or `time_us` of traffic at the link's rate."""

    packets: int | None = None
    time_us: int | None = None

    def packets_at(self, rate_bps: int, frame_bytes: int) -> int:
        """The queue in packets at `rate_bps` (full frames of `frame_bytes`)."""
        if self.packets is not None:
            return self.packets
        assert self.time_us is not None
        return max(1, math.ceil(rate_bps / 8 * self.time_us / 1e6 / frame_bytes))

    def time_us_at(self, rate_bps: int, frame_bytes: int) -> int:
        """The queue as the time it takes to send at `rate_bps` (packets: full frames of `frame_bytes`)."""
        if self.time_us is not None:
            return self.time_us
        assert self.packets is not None
        return int(self.packets * frame_bytes * 8 * 1e6 / rate_bps)


@dataclass(frozen=True)
class Background:
    """Traffic from outside the experiment on one direction of a link: a
    rate drawn from a normal distribution (`mean_bps`, `sd_bps`), clipped to
    [0, the link's rate], drawn again every `every_us`.  It sends no packets:
    it is one more flow in the sharing model on this link alone, wanting the
    drawn rate, with `rtt_us` as its round trip (its weight, as every flow's,
    is RTT^-a, a for the experiment's congestion control), so it takes its
    share of the link like any flow."""

    mean_bps: int
    sd_bps: int = 0
    every_us: int = 1_000_000
    rtt_us: int | None = None  # None: the link's own round trip, 2 x latency, at least 1 ms

    def rate_at(self, seed: int, link_id: int, run_us: int, capacity_bps: int) -> int:
        """The rate in force at `run_us`: the same on every host of a run
        (drawn from the experiment's seed, the link and the interval)."""
        interval = max(0, run_us) // self.every_us
        draw = random.Random(f"{seed}:{link_id}:{interval}").gauss(self.mean_bps, self.sd_bps)
        return int(min(max(draw, 0.0), capacity_bps))

    def round_trip_us(self, link_delay_us: int) -> int:
        return self.rtt_us if self.rtt_us is not None else max(MIN_BACKGROUND_RTT_US, 2 * link_delay_us)


MIN_BACKGROUND_RTT_US = 1000


@dataclass(frozen=True)
class Extras:
    """One direction's (a link's or a path's) properties beyond delay, jitter,
    Bernoulli loss and rate; `Extras()` is none of them."""

    loss_model: LossModel | None = None
    reorder_ratio: float = 0.0
    duplicate_ratio: float = 0.0
    corrupt_ratio: float = 0.0
    in_order: bool | None = None  # None: as the experiment says (`in-order`)
    queue: Queue | None = None
    background: Background | None = None  # a link's only: a path has none

    @property
    def needs_netem(self) -> bool:
        """Burst loss, reordering and corruption are netem's (duplication is
        Collapsar's own eBPF program: collapsar.tcal.duplicate)."""
        return bool(self.loss_model or self.reorder_ratio or self.corrupt_ratio)

    def signature(self) -> int:
        """A 63-bit number naming these values, 0 for none: a path's is the sum
        of its links' (mod 2^64), so two folds differ when their extras do."""
        if self == NO_EXTRAS:
            return 0
        digest = hashlib.blake2b(repr(self).encode(), digest_size=8).digest()
        return (int.from_bytes(digest, "little") >> 1) or 1


NO_EXTRAS = Extras()
EXTRA_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Extras))
SIGNATURE_MASK = (1 << 64) - 1


def compose(links: Sequence[tuple[float, int, int | None, Extras]], in_order: bool = False) -> tuple[float, Extras]:
    """A path's (loss rate, extras) from its links' (loss rate, jitter_us,
    rate_bps or None, extras), source first; `in_order` is the experiment's
    default for links that do not say."""
    loss, model = compose_loss([(rate, extras.loss_model) for rate, _, _, extras in links])
    jittery = [in_order if extras.in_order is None else extras.in_order for _, jitter, _, extras in links if jitter]
    queue, slowest = None, 0
    for _, _, rate, extras in links:
        if rate is not None and (not slowest or rate < slowest):
            slowest, queue = rate, extras.queue
    if queue is not None:  # in packets at the bottleneck's configured rate, not at a share
        queue = Queue(packets=queue.packets_at(slowest, FRAME_BYTES))
    return loss, Extras(  # no background: a link's own
        loss_model=model,
        reorder_ratio=compose_reorder([extras.reorder_ratio for *_, extras in links]),
        duplicate_ratio=compose_duplicate([extras.duplicate_ratio for *_, extras in links]),
        corrupt_ratio=compose_corrupt([extras.corrupt_ratio for *_, extras in links]),
        in_order=bool(jittery) and all(jittery),
        queue=queue,
    )


def with_loss(loss: float, extras: Extras, more: float) -> tuple[float, Extras]:
    """A path's loss with an independent loss `more` added (the sharing
    model's congestion loss), its chain thinned to match."""
    keep = 1.0 - more
    model = extras.loss_model
    if model is not None:
        extras = replace(extras, loss_model=model.thinned(keep))
    return round(1.0 - (1.0 - loss) * keep, 12), extras


def describe(extras: Extras) -> str:
    """One line for people: `bursts of 4 (gemodel p 0.0126 r 0.25), reorder 1%, queue 17 packets`."""
    parts = []
    model = extras.loss_model
    if model is not None:
        parts.append(
            f"bursts of {model.mean_burst():.3g} (gemodel p {model.to_bad:.4g} r {model.to_good:.4g} "
            f"1-h {model.loss_in_bad:.4g} 1-k {model.loss_in_good:.4g})"
        )
    for name, value in (
        ("reorder", extras.reorder_ratio),
        ("duplicate", extras.duplicate_ratio),
        ("corrupt", extras.corrupt_ratio),
    ):
        if value:
            parts.append(f"{name} {value * 100:.4g}%")
    if extras.in_order:
        parts.append("in order")
    queue = extras.queue
    if queue is not None:
        parts.append(f"queue {queue.packets} packets" if queue.packets is not None else f"queue {queue.time_us}us")
    return ", ".join(parts)


def as_json(extras: Extras) -> dict:
    """A path's extras as plain JSON values (`collapsar collapse --json`; a
    path's queue is in packets, see `compose`)."""
    model = extras.loss_model
    queue = extras.queue
    return {
        "loss_model": None if model is None else {**model.__dict__, "mean_burst": model.mean_burst()},
        "reorder": extras.reorder_ratio,
        "duplicate": extras.duplicate_ratio,
        "corrupt": extras.corrupt_ratio,
        "in_order": bool(extras.in_order),
        "queue_packets": None if queue is None else queue.packets,
    }
