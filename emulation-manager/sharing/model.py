"""The bandwidth-sharing model: RTT-aware min-max with maximization, as a pure function.

Input: the active flows every manager knows about (its own and those heard
over Aeron) and the capacity of every emulated link.  Output: the rate each
flow may use and the congestion loss of each oversubscribed link.  Nothing
here measures, sends or touches tc: the manager loop does, and smooths.

The model (Kollaps, EuroSys'20, section 3):
- on each link, flows share the capacity in proportion to 1/RTT (TCP Reno's
  throughput is inversely proportional to its RTT); here RTT^-a, with the
  `a` measured for the experiment's congestion control (`RTT_EXPONENT`);
- a flow that uses less than its share leaves the spare to the flows that want
  more, in proportion to their shares (the maximization step);
- a flow's rate is the minimum over the links of its path, capped by the path
  capacity.

Those three rules together are weighted max-min fairness with weights RTT^-a,
each flow capped by min(demand, path capacity), and we compute its exact fixed
point by progressive filling: raise a common level t, give every unfrozen flow
w_f * t, freeze a flow when it reaches its cap or when one of its links fills.
A flow frozen by its own demand is *demand-limited*: its allowed rate stays at
its plain RTT share (not at its demand) so it can grow next period without
first being starved; the others already got its unused part.

Congestion loss: when the measured demand on a link exceeds its capacity, a
real drop-tail bottleneck would discard the excess, so loss = (D - C) / D;
flows crossing several such links compound it.

Standing queues: the links the flows fill (`Sharing.full_links`, each with
the flows it holds back) hold a standing queue, a part of their buffer
that depends on the congestion control and on how many flows fill them
(`StandingQueue`, `standing_queues`); what else crosses such a link waits
in it (the manager loop adds it to those paths' delays), and loses the
part of its packets that arrive while the buffer is full
(`full_queue_drops`, added to those paths' loss).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from collapsar.errors import CollapsarError
from collapsar.model import host_congestion_control

FlowId = Hashable
LinkId = int

# Relative tolerance when deciding that two float levels are the same event.
_TIE = 1e-9


# A congestion control's flows share a bottleneck in proportion to RTT^-a,
# RTT the path's own round trip (2 x its delay).  Reno alone in a network
# would give a = 1 (Kollaps's model), but flows that meet in a drop-tail
# queue all wait in it, which dilutes their RTTs' difference; CUBIC does
# much the same, and BBR gives the longer RTT more.  Measured against the
# hop-by-hop reference network (BDP-sized queues): two flows with RTTs 20
# and 80 ms through one 10 Mbit/s bottleneck, 5 runs per control,
# a = -ln(far / near) / ln 4 of the mean rates (bench/rtt-pair.yaml; the
# runs and the check on the Kollaps scenario in docs/fidelity.md, "RTT
# weights per congestion control").
RTT_EXPONENT: dict[str, float] = {"reno": 0.55, "cubic": 0.47, "bbr": -0.46}
UNMEASURED_RTT_EXPONENT = RTT_EXPONENT["reno"]  # another loss-based control: Reno's


def rtt_exponent(congestion_control: str | None) -> float:
    """The weight exponent for the experiment's `congestion-control`; None:
    the one this host's new namespaces start with (its default)."""
    if congestion_control is None:
        congestion_control = host_congestion_control()
    return RTT_EXPONENT.get(congestion_control or "", UNMEASURED_RTT_EXPONENT)


class StandingQueue(NamedTuple):
    """A full drop-tail link's mean standing queue as a part of its buffer,
    for one congestion control: `one` with a single flow filling the link,
    approaching `many` as more do (their back-offs fall apart in time, each
    taking 1/n of the load off the queue): many - (many - one) / n, at
    most the whole buffer."""

    one: float
    many: float
    # The part of what crosses the full link without being one of its flows
    # that its full buffer drops: (flows, ratio) as measured, by flow count.
    drops: tuple[tuple[int, float], ...] = ()

    def part(self, flows: int) -> float:
        return min(1.0, self.many - (self.many - self.one) / max(1, flows))

    def drop(self, flows: int) -> float:
        """`drops` for `flows` flows filling the link: straight between the
        measured counts, the nearest one's ratio outside them."""
        if not self.drops:
            return 0.0
        counts, ratios = zip(*self.drops)
        return float(np.interp(flows, counts, ratios))


# What a packet that crosses a full link waits there when it is not one of
# the flows that fill it (a ping, a flow held back elsewhere), per
# congestion control, measured against the hop-by-hop reference
# (bench/queue_bench.py; docs/fidelity.md, "RTT under load"): 1, 2 and 4
# flows through a 10 Mbit/s link with a 44 ms buffer, 2 runs each, gave
# Reno 0.53, 0.64, 0.72 of it; CUBIC 0.81, 0.81, 0.84; BBR 0.45, 0.90, 0.99
# (BBR's flows together keep the buffer full: its `many` passes 1).
# A packet that arrives while that buffer is full is lost, whoever sent it:
# of the pings sent while the flows filled the link (10 a second, 148-149 a
# run; counted by sequence number, bench/queue_bench.py `loaded_losses`),
# the reference lost 13 of 892 under Reno (2 runs per flow count) and 10
# of 2226 under CUBIC (5 runs), with no trend in the flow count at those
# counts, and under BBR 6 of 298, 19 of 297 and 51 of 297 with 1, 2 and 4
# flows; Collapsar, without drops to model, lost none (docs/fidelity.md,
# "The full queue's drops").
STANDING_QUEUE: dict[str, StandingQueue] = {
    "reno": StandingQueue(0.53, 0.77, ((1, 0.015),)),
    "cubic": StandingQueue(0.81, 0.85, ((1, 0.0045),)),
    "bbr": StandingQueue(0.45, 1.35, ((1, 0.020), (2, 0.064), (4, 0.172))),
}
UNMEASURED_STANDING_QUEUE = STANDING_QUEUE["reno"]  # another loss-based control: Reno's
# A link's buffer without its own `queue`: the longest round trip of the
# flows crossing it at its rate, as a path's default queue (tcal/plan.py).
MIN_BUFFER_US = 20_000


def standing_queue(congestion_control: str | None) -> StandingQueue:
    """STANDING_QUEUE for the experiment's control (None: this host's default)."""
    if congestion_control is None:
        congestion_control = host_congestion_control()
    return STANDING_QUEUE.get(congestion_control or "", UNMEASURED_STANDING_QUEUE)


class SharingInputError(CollapsarError):
    """The sharing model was handed flows or links that make no sense."""


@dataclass(frozen=True)
class Flow:
    """One active flow: all traffic from one instance to one destination."""

    flow_id: FlowId
    link_ids: tuple[LinkId, ...]
    rtt_us: int
    path_rate_bps: int | None  # None: the path has no rate limit
    demand_bps: int  # measured throughput over the last period


@dataclass(frozen=True)
class Sharing:
    """The model's answer for one period."""

    rate_bps: dict[FlowId, int | None]  # None: nothing limits the flow
    link_loss_ratio: dict[LinkId, float]  # only oversubscribed links
    flow_loss_ratio: dict[FlowId, float]  # only flows crossing one of them
    # The links the flows fill, each with the flows it holds back (their
    # bottleneck: where a network would queue their backlog).
    full_links: dict[LinkId, frozenset[FlowId]] = field(default_factory=dict)


def share(flows: Sequence[Flow], link_rate_bps: Mapping[LinkId, int | None], rtt_exponent: float = 1.0) -> Sharing:
    """Each flow's rate and each oversubscribed link's loss (see the module
    doc); flows weigh RTT^-rtt_exponent (see `rtt_exponent`)."""
    if not flows:
        return Sharing({}, {}, {})
    arrays = _Arrays(flows, link_rate_bps, rtt_exponent)
    alloc, link_limited = _progressive_fill(arrays)
    rates = _allowed_rates(arrays, alloc, link_limited)
    link_loss = _link_loss(arrays)
    flow_loss = _flow_loss(arrays, link_loss)
    ids = [flow.flow_id for flow in flows]
    return Sharing(
        rate_bps={fid: (None if math.isinf(r) else int(round(r))) for fid, r in zip(ids, rates.tolist())},
        link_loss_ratio={arrays.link_ids[i]: float(link_loss[i]) for i in np.flatnonzero(link_loss > 0)},
        flow_loss_ratio={ids[i]: float(flow_loss[i]) for i in np.flatnonzero(flow_loss > 0)},
        full_links=_full_links(arrays, alloc, link_limited, ids),
    )


def _full_links(a: _Arrays, alloc: np.ndarray, link_limited: np.ndarray, ids: list) -> dict[LinkId, frozenset]:
    """Each link a flow's fill stopped at, with the flows it stopped: a link
    holds a flow back where that flow's level (rate / weight) is the highest
    of the link's flows (weighted max-min's bottleneck condition), the link
    being full; a flow stopped at two links at once has both."""
    if not link_limited.any():
        return {}
    level = np.where(link_limited, alloc / a.weight, 0.0)
    top = np.zeros(a.n_links)
    np.maximum.at(top, a.inc_link, level[a.inc_flow])
    full = a.per_link(np.where(np.isfinite(alloc), alloc, 0.0)) >= a.link_cap * (1 - 1e-6)
    held = link_limited[a.inc_flow] & full[a.inc_link] & (level[a.inc_flow] >= top[a.inc_link] * (1 - 1e-6))
    links, flows = a.inc_link[held], a.inc_flow[held]
    order = np.argsort(links, kind="stable")
    links, flows = links[order], flows[order]
    cuts = np.flatnonzero(np.diff(links)) + 1
    return {
        a.link_ids[int(group_links[0])]: frozenset(ids[i] for i in group_flows.tolist())
        for group_links, group_flows in zip(np.split(links, cuts), np.split(flows, cuts))
        if len(group_links)
    }


class _Arrays:
    """Flows as numpy arrays plus a flow x link incidence list (one entry per
    (flow, limited link) pair), so every step is a handful of vector ops."""

    def __init__(self, flows: Sequence[Flow], link_rate_bps: Mapping[LinkId, int | None], rtt_exponent: float = 1.0):
        _check(flows)
        lengths = np.fromiter((len(f.link_ids) for f in flows), dtype=np.intp, count=len(flows))
        flat = np.fromiter(
            itertools.chain.from_iterable(f.link_ids for f in flows), dtype=np.int64, count=int(lengths.sum())
        )
        used, entry_link = np.unique(flat, return_inverse=True)
        capacity = np.empty(len(used))
        for j, link_id in enumerate(used.tolist()):
            if link_id not in link_rate_bps:
                owner = next(f for f in flows if link_id in f.link_ids)
                raise SharingInputError(f"flow {owner.flow_id!r}: link {link_id} has no entry in the link capacities")
            rate = link_rate_bps[link_id]
            if rate is not None and rate <= 0:
                raise SharingInputError(f"link {link_id}: capacity must be above zero, got {rate} bps")
            capacity[j] = math.inf if rate is None else float(rate)
        # An unlimited link constrains nobody: keep only limited links.
        limited = np.isfinite(capacity)
        renumber = np.cumsum(limited) - 1
        keep = limited[entry_link]
        self.link_ids: list[LinkId] = used[limited].tolist()
        self.link_cap = capacity[limited]
        self.n_flows = len(flows)
        self.n_links = len(self.link_ids)
        self.inc_flow = np.repeat(np.arange(self.n_flows), lengths)[keep]
        self.inc_link = renumber[entry_link][keep]
        # Weights in (1/s)^exponent: only ratios matter, seconds keep levels readable.
        self.weight = (1e6 / np.fromiter((f.rtt_us for f in flows), dtype=float, count=self.n_flows)) ** rtt_exponent
        self.demand = np.fromiter((f.demand_bps for f in flows), dtype=float, count=self.n_flows)
        self.path_cap = np.fromiter(
            (math.inf if f.path_rate_bps is None else f.path_rate_bps for f in flows), dtype=float, count=self.n_flows
        )

    def per_link(self, per_flow: np.ndarray, entries: np.ndarray | None = None) -> np.ndarray:
        """Sum a per-flow quantity over the flows of each link (optionally over
        a subset of incidence entries)."""
        if entries is None:
            return np.bincount(self.inc_link, weights=per_flow[self.inc_flow], minlength=self.n_links)
        return np.bincount(self.inc_link[entries], weights=per_flow[self.inc_flow[entries]], minlength=self.n_links)


def _check(flows: Sequence[Flow]) -> None:
    seen: set[FlowId] = set()
    for flow in flows:
        where = f"flow {flow.flow_id!r}"
        if flow.flow_id in seen:
            raise SharingInputError(f"{where}: the same flow id appears twice")
        seen.add(flow.flow_id)
        if flow.rtt_us <= 0:
            raise SharingInputError(f"{where}: rtt_us must be above zero, got {flow.rtt_us}")
        if flow.demand_bps < 0:
            raise SharingInputError(f"{where}: demand_bps must not be negative, got {flow.demand_bps}")
        if flow.path_rate_bps is not None and flow.path_rate_bps <= 0:
            raise SharingInputError(f"{where}: path_rate_bps must be above zero, got {flow.path_rate_bps}")
        if len(set(flow.link_ids)) != len(flow.link_ids):
            raise SharingInputError(f"{where}: a path crosses link ids {flow.link_ids}, one of them twice")


class _Filling:
    """Progressive-filling state, updated incrementally as flows freeze, so a
    step costs a few vector ops over the links rather than over all entries."""

    def __init__(self, a: _Arrays):
        self.a = a
        self.cap = np.minimum(a.demand, a.path_cap)
        self.alloc = np.zeros(a.n_flows)
        self.live = np.ones(a.n_flows, dtype=bool)
        self.n_live = a.n_flows
        self.link_limited = np.zeros(a.n_flows, dtype=bool)
        self.live_weight = a.per_link(a.weight)
        self.live_count = np.bincount(a.inc_link, minlength=a.n_links)
        self.room = a.link_cap.copy()
        self.was_live_entry = np.ones(len(a.inc_flow), dtype=bool)
        order = np.argsort(a.inc_link, kind="stable")
        self.flows_by_link = a.inc_flow[order]
        self.link_start = np.concatenate(([0], np.cumsum(self.live_count)))

    def freeze(self, idx: np.ndarray, value: np.ndarray) -> None:
        self.alloc[idx] = value
        self.live[idx] = False
        self.n_live -= len(idx)
        entries = ~self.live[self.a.inc_flow] & self.was_live_entry
        self.was_live_entry &= ~entries
        self.live_weight -= self.a.per_link(self.a.weight, entries)
        self.room -= self.a.per_link(self.alloc, entries)
        self.live_count -= np.bincount(self.a.inc_link[entries], minlength=self.a.n_links)

    def flows_on(self, links: list[int]) -> np.ndarray:
        parts = [self.flows_by_link[self.link_start[j] : self.link_start[j + 1]] for j in links]
        flows = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))
        return flows[self.live[flows]]


def _progressive_fill(a: _Arrays) -> tuple[np.ndarray, np.ndarray]:
    """Weighted max-min allocation; also which flows a full link stopped."""
    f = _Filling(a)
    cap_level = f.cap / a.weight  # the level at which each flow reaches its cap
    by_cap = np.argsort(cap_level, kind="stable")
    sorted_cap_level = cap_level[by_cap]
    next_cap = 0
    link_level = np.empty(a.n_links)
    while f.n_live:
        link_level.fill(math.inf)
        np.divide(np.maximum(f.room, 0.0), f.live_weight, out=link_level, where=f.live_count > 0)
        next_link = link_level.min(initial=math.inf)
        # Every flow whose cap comes before the first link fills can freeze at
        # once: freezing only slows the links' filling, so no link fills earlier.
        upto = int(np.searchsorted(sorted_cap_level, next_link * (1 - _TIE), side="left"))
        if upto > next_cap:
            idx = by_cap[next_cap:upto]
            next_cap = upto
            idx = idx[f.live[idx]]
            if len(idx):
                f.freeze(idx, f.cap[idx])
            continue
        if math.isinf(next_link):
            f.alloc[f.live] = math.inf  # neither a cap nor a limited link: unlimited
            break
        idx, level = _independent_fills(f, link_level, next_link, cap_level)
        f.freeze(idx, np.minimum(a.weight[idx] * level, f.cap[idx]))
        f.link_limited[idx] = True
    return f.alloc, f.link_limited


def _independent_fills(f: _Filling, link_level: np.ndarray, first: float, cap_level: np.ndarray):
    """The flows of the first link(s) to fill, plus those of every next link in
    level order whose level is still exact: none of its flows is frozen earlier
    (by a link before it, or by its own cap).  Filling them in one step instead
    of one link per step cuts the steps several-fold on large topologies."""
    ties = np.flatnonzero(link_level <= first * (1 + _TIE))
    groups = [f.flows_on(ties.tolist())]
    levels = [np.full(len(groups[0]), first)]
    touched = np.zeros(f.a.n_flows, dtype=bool)
    touched[groups[0]] = True
    rest = np.flatnonzero(np.isfinite(link_level) & (link_level > first * (1 + _TIE)))
    for j in rest[np.argsort(link_level[rest], kind="stable")].tolist():
        level = link_level[j]
        flows = f.flows_on([j])
        if touched[flows].any() or (cap_level[flows] < level * (1 - _TIE)).any():
            break
        touched[flows] = True
        groups.append(flows)
        levels.append(np.full(len(flows), level))
    return np.concatenate(groups), np.concatenate(levels)


def _rtt_share(a: _Arrays) -> np.ndarray:
    """Each flow's plain RTT-aware share: min over its links of C * w_f / sum(w)."""
    if a.n_links == 0:
        return np.full(a.n_flows, math.inf)
    per_entry = a.link_cap[a.inc_link] * a.weight[a.inc_flow] / a.per_link(a.weight)[a.inc_link]
    out = np.full(a.n_flows, math.inf)
    np.minimum.at(out, a.inc_flow, per_entry)
    return out


def _allowed_rates(a: _Arrays, alloc: np.ndarray, link_limited: np.ndarray) -> np.ndarray:
    demand_limited = ~link_limited & (a.demand < a.path_cap)
    lent = np.minimum(np.maximum(_rtt_share(a), alloc), a.path_cap)
    return np.where(demand_limited, lent, alloc)


def _link_loss(a: _Arrays) -> np.ndarray:
    offered = a.per_link(a.demand)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(offered > a.link_cap, (offered - a.link_cap) / offered, 0.0)


def _flow_loss(a: _Arrays, link_loss: np.ndarray) -> np.ndarray:
    survive = np.ones(a.n_flows)
    np.multiply.at(survive, a.inc_flow, 1.0 - link_loss[a.inc_link])
    return 1.0 - survive


def congestion_loss(
    flows: Sequence[Flow],
    offered_bps: Mapping[FlowId, int],
    allowed_bps: Mapping[FlowId, int | None],
    link_rate_bps: Mapping[LinkId, int | None],
    tolerance: float = 0.0,
) -> tuple[dict[LinkId, float], dict[FlowId, float]]:
    """The loss that brings every oversubscribed link back to its capacity.

    A link is oversubscribed when its flows *offer* more than it carries
    (`offered_bps`: the measured rates, not the model's demands).  Its excess
    is charged to the flows that send above their allowed rate, in
    proportion to their excess: a flow within its share is not what
    overloads the link (as under fair queueing), so an unresponsive UDP
    sender cannot make a TCP flow that keeps to its share lose packets.
    When no flow is above its allowance (the model lent spare capacity and a
    flow grew back into it) the excess is charged to all, drop-tail style.
    A flow's losses on several such links compound.

    `tolerance` is the measurement noise to forgive: a link counts as
    oversubscribed above (1 + tolerance) x its capacity, and a flow is above
    its share only beyond (1 + tolerance) x its allowed rate (a TCP flow's
    windowed rate overshoots its class by a few percent in its sawtooth).

    Returns (link id -> (offered - capacity) / offered, flow id -> loss)."""
    on_link: dict[LinkId, list[Flow]] = {}
    for flow in flows:
        for link_id in flow.link_ids:
            on_link.setdefault(link_id, []).append(flow)
    link_loss: dict[LinkId, float] = {}
    keep: dict[FlowId, float] = {}
    for link_id, members in on_link.items():
        capacity = link_rate_bps.get(link_id)
        offered = sum(offered_bps.get(f.flow_id, 0) for f in members)
        if capacity is None or offered <= capacity * (1 + tolerance):
            continue
        excess = offered - capacity
        link_loss[link_id] = excess / offered
        over = {
            f.flow_id: max(
                0, offered_bps.get(f.flow_id, 0) - (allowed_bps.get(f.flow_id) or math.inf) * (1 + tolerance)
            )
            for f in members
        }
        total_over = sum(over.values())
        for flow in members:
            sent = offered_bps.get(flow.flow_id, 0)
            if sent <= 0:
                continue
            if total_over > 0:
                loss = over[flow.flow_id] * min(1.0, excess / total_over) / sent
            else:
                loss = excess / offered
            if loss > 0:
                keep[flow.flow_id] = keep.get(flow.flow_id, 1.0) * (1.0 - loss)
    return link_loss, {fid: 1.0 - k for fid, k in keep.items()}


def full_queue_drops(full_links: Mapping[LinkId, frozenset], queue: StandingQueue) -> dict[LinkId, float]:
    """Each full link's drop ratio for what crosses it without being one of
    the flows it holds back: `queue.drop(n)`, n those flows (the held flows'
    own drops are their classes' queues)."""
    return {link_id: ratio for link_id, held in full_links.items() if (ratio := queue.drop(len(held))) > 0}


def standing_queues(
    flows: Sequence[Flow],
    full_links: Mapping[LinkId, frozenset],
    link_buffer_us: Mapping[LinkId, int | None],
    queue: StandingQueue,
) -> dict[LinkId, int]:
    """The mean wait (us) in each full link's queue: `queue.part(n)` of its
    buffer, n the flows it holds back; the buffer is the link's own queue
    as a time at its rate (`link_buffer_us`; None or absent: not set) or,
    without one, the longest round trip among the flows crossing it (at
    least MIN_BUFFER_US): the reference's rule for a link's buffer and
    Collapsar's for a path's."""
    if not full_links:
        return {}
    longest: dict[LinkId, int] = {}
    for flow in flows:
        for link_id in flow.link_ids:
            if link_id in full_links and flow.rtt_us > longest.get(link_id, 0):
                longest[link_id] = flow.rtt_us
    waits = {}
    for link_id, held in full_links.items():
        buffer = link_buffer_us.get(link_id)
        if buffer is None:
            buffer = max(MIN_BUFFER_US, longest.get(link_id, 0))
        waits[link_id] = int(round(queue.part(len(held)) * buffer))
    return waits
