"""The per-period bandwidth-sharing step of one manager (Kollaps section 3).

A manager owns some instances (all of them in local mode, those of its node
in a multi-host run).  Every period `ShareLoop.tick`:

1. turns the eBPF counters of its cores (cumulative wire bytes per
   (src, dst)) into rates over the last `window_periods` (4: a TCP flow's
   rate over one 50 ms period swings by +-30% around its share);
2. keeps as *active* the destinations whose rate is above `active_ratio`
   (1%) of the path's capacity; a flow is *saturated* when it sends at
   `saturated_ratio` (70%) or more of the rate it is allowed: its shaper holds
   it back, so its demand is unknown and the model lets it grow up to the
   path capacity (otherwise a flow would never climb above the share it was
   last given, and the maximization step could not work);
3. publishes its cores' flows on the metadata bus and merges them with the
   flows the other managers published (expired senders are gone);
4. runs `sharing.share` over all flows with the link capacities of the
   timeline's current state, and `sharing.congestion_loss` over the measured
   rates;
5. pushes into its cores an `Override` per active destination: decreases at
   once, increases smoothed by `increase_gain`; congestion loss only where
   the experiment has netem.  A destination that stopped or was cut gets its
   override removed: its capacity goes back to the others through the model;
6. with netem, adds to the delay of every own destination whose path
   crosses a full link the wait in that link's standing queue
   (`sharing.standing_queues`), unless the link is the one that holds its
   own flow back (that flow's backlog waits in its own class): in a network
   the flows that fill a link queue there, and everything else crossing it
   waits behind them, and loses what the full buffer drops
   (`sharing.full_queue_drops`; saturated or not, but for the link that
   holds it back).  Every `queue_every_periods` the wait moves by
   `queue_gain` towards its target, and reaches a class when it moved by
   `queue_push_us` or `queue_push_ratio` (a link that fills or drains
   changes a class for every destination across it, from every instance).

Choosing the window and `increase_gain` (bench/sharing_bench.py
--convergence: two real iperf3 flows on a 20 Mbit/s link, b joins a for 5 s;
3 interleaved runs per variant, medians, host load average 11-15): the model
cuts at once when b starts (0 periods in every variant); after b stops, a's
allowance is back within 5% of the link after 9 periods with gain 0.25, 4
with 0.5, 3 with 1.0 (window 4), 3 with gain 0.5 and a 2-period window.
While both run, a's allowance jumped by >10% (b's TCP dipping below 70% of
its share for a window) 0.8/s at gain 0.25, 1.0/s at 0.5, 1.1/s at 1.0 and
1.6/s with the 2-period window.  Gain 0.5 with a 4-period window costs one
period against gain 1 and halves each jump; the traffic itself (TCP, 5-period
averages within 10%) settled 8-60 periods after a change in every variant,
dominated by TCP on a loaded host, not by the loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from collapsar.impairments import FRAME_BYTES
from collapsar.manager.core import EmulationCore, Override
from collapsar.manager.sharing.bus import MetadataBus
from collapsar.manager.sharing.metadata import FlowReport
from collapsar.manager.sharing.model import (
    Flow,
    congestion_loss,
    full_queue_drops,
    rtt_exponent,
    share,
    standing_queue,
    standing_queues,
)
from collapsar.model import Path


@dataclass(frozen=True)
class ShareSettings:
    window_periods: int = 4
    active_ratio: float = 0.01
    active_floor_bps: int = 16_000  # for a path without a rate: 2 kB/s is not a flow
    saturated_ratio: float = 0.7
    increase_gain: float = 0.5
    push_ratio: float = 0.005  # smaller rate moves are not worth a netlink change
    snap_ratio: float = 0.02  # an increase this close to its target lands on it
    loss_step: float = 0.005
    loss_tolerance: float = 0.10  # see sharing.congestion_loss; the windowed rate's noise
    queue_gain: float = 0.5  # a standing queue builds and drains within a few round trips; 0: no waits
    queue_push_us: int = 2000  # smaller moves of a destination's wait are not pushed ...
    queue_push_ratio: float = 0.1  # ... unless they are this part of it
    queue_floor_us: int = 500  # a link's wait below this is none
    queue_every_periods: int = 2  # how often the waits move (each move can change many classes)
    queue_hold_periods: int = 40  # a flow saturated this recently gets no wait (its delay stays put)


@dataclass
class OwnFlow:
    src: str
    dst: str
    path: Path
    rate_bps: int
    saturated: bool


BACKGROUND = "background"  # the first part of a background flow's id, and its rows' src


class _LinkView:
    """Capacity and delay per link id for one timeline state (cached: a
    state object never changes, and the timeline hands out the same object
    until the next step)."""

    def __init__(self, state):
        self.state = state
        links = state.links
        self.capacity = {lid: (link.props.rate_bps if link.present else None) for lid, link in links.items()}
        self.delay_us = {lid: link.props.delay_us for lid, link in links.items()}
        self.ends = {lid: (link.src, link.dst) for lid, link in links.items()}
        # Present links with background traffic (collapsar.impairments.Background).
        self.background = {
            lid: link.props.extras.background
            for lid, link in links.items()
            if link.present and link.props.extras.background is not None and self.capacity[lid] is not None
        }
        self.seed = state.graph.experiment.settings.seed
        self.rtt_exponent = rtt_exponent(state.graph.experiment.settings.congestion_control)
        self.standing_queue = standing_queue(state.graph.experiment.settings.congestion_control)
        # A link's own `queue` as a time at its rate (full frames, as Queue counts them).
        self.buffer_us = {
            lid: link.props.extras.queue.time_us_at(link.props.rate_bps, FRAME_BYTES)
            for lid, link in links.items()
            if link.props.extras.queue is not None and link.props.rate_bps
        }

    def background_flows(self, run_us: int) -> list[Flow]:
        """One flow per link with background traffic: wanting the rate drawn for now."""
        flows = []
        for lid, background in self.background.items():
            capacity = self.capacity[lid]
            assert capacity is not None
            rate = background.rate_at(self.seed, lid, run_us, capacity)
            rtt_us = background.round_trip_us(self.delay_us[lid])
            flows.append(Flow((BACKGROUND, lid), (lid,), rtt_us, capacity, rate))
        return flows

    def remote_flow(self, flow_id, report: FlowReport) -> Flow:
        caps = [self.capacity.get(lid) for lid in report.link_ids]
        limited = [c for c in caps if c is not None]
        path_rate = min(limited) if limited else None
        rtt_us = max(1, 2 * sum(self.delay_us.get(lid, 0) for lid in report.link_ids))
        demand = path_rate if report.saturated and path_rate is not None else report.rate_bps
        return Flow(flow_id, tuple(report.link_ids), rtt_us, path_rate, demand)


class ShareLoop:
    def __init__(
        self,
        owned: Sequence[str],
        cores: Mapping[str, EmulationCore],
        bus: MetadataBus,
        *,
        netem: bool,
        settings: ShareSettings = ShareSettings(),
        apply: Callable[[str, dict[str, Override | None]], None] | None = None,
        configured: Callable[[str], dict[str, Path | None]] | None = None,
        sender_names: Mapping[int, str] | None = None,
    ):
        self.owned = list(owned)
        self.cores = cores
        self.bus = bus
        self.netem = netem
        self.settings = settings
        # Both hooks let a caller hold the lock its timeline thread takes.
        self._apply = apply or (lambda src, changes: self.cores[src].set_overrides(changes))
        self._configured = configured or (lambda src: self.cores[src].configured())
        self._sender_names = dict(sender_names or {})
        self.period = 0
        self._samples: dict[tuple[str, str], deque] = {}
        self.applied: dict[tuple[str, str], Override] = {}  # what each own destination got
        self._view: _LinkView | None = None
        self.link_waits: dict[int, float] = {}  # each full link's standing queue (us), smoothed
        self._link_state: dict[int, tuple] = {}  # link -> (wait in ms, held flows) its destinations were set for
        self._saturated: set[tuple[str, str]] = set()  # the saturated own flows they were set for
        self._saturated_until: dict[tuple[str, str], int] = {}  # own flow -> the last period it counts as saturated
        self._crossing: tuple[dict[int, list[tuple[str, str]]], dict[tuple[str, str], tuple[int, ...]]] | None = None
        self._crossing_of: _LinkView | None = None  # the state the index was made for (None: remake it)
        self.last: dict = {"flows": [], "links": []}

    def own(self, cores: Mapping[str, EmulationCore]) -> None:
        """The cores this manager owns from now on (container mode).  A core
        that is gone or was replaced (a restarted container gets a new one)
        took its overrides with it: they are forgotten, not removed."""
        before = self.cores
        self.owned = list(cores)
        self.cores = dict(cores)
        for key in [k for k in self.applied if before.get(k[0]) is not self.cores.get(k[0])]:
            del self.applied[key]
        self._crossing_of = None  # new cores' destinations: index them and set their waits again

    # ---- 1-2: measurement --------------------------------------------------------

    def _rates(self, now_ns: int, wire_bytes: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int]:
        rates = {}
        for key, total in wire_bytes.items():
            samples = self._samples.setdefault(key, deque(maxlen=self.settings.window_periods + 1))
            samples.append((now_ns, total))
            first_ns, first_bytes = samples[0]
            if now_ns > first_ns:
                rates[key] = max(0, int((total - first_bytes) * 8e9 / (now_ns - first_ns)))
        return rates

    def _own_flows(self, rates: Mapping[tuple[str, str], int]) -> list[OwnFlow]:
        s = self.settings
        # Only sources with a destination above the absolute floor can have an
        # active flow: their paths are looked up, not every configured pair
        # (N^2 per period: 40k at 200 instances, more than a period's budget).
        busy: dict[str, set[str]] = {}
        for (src, dst), rate in rates.items():
            if rate >= s.active_floor_bps:
                busy.setdefault(src, set()).add(dst)
        found = []
        for src in self.owned:
            if src not in busy:
                continue
            wanted = busy[src]
            for dst, path in self._configured(src).items():
                if path is None or dst not in wanted:
                    continue
                rate = rates[(src, dst)]
                floor = (
                    s.active_floor_bps
                    if path.rate_bps is None
                    else max(s.active_floor_bps, s.active_ratio * path.rate_bps)
                )
                if rate < floor:
                    continue
                allowed = self.applied.get((src, dst), Override()).rate_bps or path.rate_bps
                saturated = allowed is not None and rate >= s.saturated_ratio * allowed
                found.append(OwnFlow(src, dst, path, rate, saturated))
        return found

    # ---- the step ----------------------------------------------------------------

    def tick(self, now_ns: int, wire_bytes: Mapping[tuple[str, str], int], state, run_us: int = 0) -> None:
        """One period; `run_us` is the run's clock (background traffic draws by it)."""
        self.period += 1
        if self._view is None or self._view.state is not state:
            self._view = _LinkView(state)
        view = self._view
        own = self._own_flows(self._rates(now_ns, wire_bytes))
        by_core: dict[str, list[FlowReport]] = {src: [] for src in self.owned}
        for f in own:
            by_core[f.src].append(FlowReport(f.path.link_ids, f.rate_bps, f.saturated))
        self.bus.publish(self.period, by_core)
        remote = self.bus.receive(self.period, state)

        flows: list[Flow] = []
        offered: dict = {}
        saturated: dict[Hashable, bool] = {(f.src, f.dst): f.saturated for f in own}
        for f in own:
            demand = f.path.rate_bps if f.saturated and f.path.rate_bps is not None else f.rate_bps
            flow = Flow((f.src, f.dst), f.path.link_ids, max(1, f.path.rtt_hint_us), f.path.rate_bps, demand)
            flows.append(flow)
            offered[flow.flow_id] = f.rate_bps
        for sender, reports in remote.items():
            for index, report in enumerate(reports):
                flow = view.remote_flow(("peer", sender, index), report)
                flows.append(flow)
                offered[flow.flow_id] = report.rate_bps
                saturated[flow.flow_id] = report.saturated
        for flow in view.background_flows(run_us):
            flows.append(flow)
            offered[flow.flow_id] = flow.demand_bps
            saturated[flow.flow_id] = False
        result = share(flows, view.capacity, view.rtt_exponent)
        link_loss, flow_loss = congestion_loss(
            flows, offered, result.rate_bps, view.capacity, self.settings.loss_tolerance
        )
        self._push(own, result.rate_bps, flow_loss)
        if self.netem and self.settings.queue_gain > 0 and self.period % self.settings.queue_every_periods == 0:
            self._wait(standing_queues(flows, result.full_links, view.buffer_us, view.standing_queue))
            self._push_waits(
                result.full_links, self._held_saturated(own), full_queue_drops(result.full_links, view.standing_queue)
            )
        self._record(saturated, flows, offered, result.rate_bps, link_loss, flow_loss)

    def _smoothed(self, current: int | None, target: int | None) -> int | None:
        if target is None or current is None or target <= current:
            return target  # decreases at once
        step = current + self.settings.increase_gain * (target - current)
        return target if target - step <= self.settings.snap_ratio * target else int(step)

    def _push(self, own: list[OwnFlow], rates: Mapping, flow_loss: Mapping) -> None:
        s = self.settings
        changes: dict[str, dict[str, Override | None]] = {}
        active = set()
        for f in own:
            key = (f.src, f.dst)
            active.add(key)
            before = self.applied.get(key, Override())
            current = before.rate_bps if before.rate_bps is not None else f.path.rate_bps
            rate = self._smoothed(current, rates.get(key))
            if rate is not None and f.path.rate_bps is not None and rate >= f.path.rate_bps:
                rate = None  # the path's own rate: no override needed
            loss = round(flow_loss.get(key, 0.0) / s.loss_step) * s.loss_step if self.netem else 0.0
            new = replace(before, rate_bps=rate, loss_ratio=min(loss, 1.0))
            if new.rate_bps is None or before.rate_bps is None:
                moved = new.rate_bps != before.rate_bps
            else:
                moved = abs(new.rate_bps - before.rate_bps) > s.push_ratio * before.rate_bps
            if moved or new.loss_ratio != before.loss_ratio:
                changes.setdefault(f.src, {})[f.dst] = None if new == Override() else new
                self._set_applied(key, new)
        for key, before in list(self.applied.items()):
            if key not in active and (before.rate_bps is not None or before.loss_ratio):
                # Stopped or cut: give the capacity back (a wait and drops stay: their link is still full).
                new = replace(before, rate_bps=None, loss_ratio=0.0)
                changes.setdefault(key[0], {})[key[1]] = None if new == Override() else new
                self._set_applied(key, new)
        for src, per_dst in changes.items():
            self._apply(src, per_dst)

    # ---- 6: the standing queues of full links ------------------------------------

    def _wait(self, targets: Mapping[int, int]) -> None:
        """Move each link's wait towards its target (0: the link is not full)."""
        s = self.settings
        for lid in set(targets) | set(self.link_waits):
            target = targets.get(lid, 0)
            now = self.link_waits.get(lid, 0.0)
            now += s.queue_gain * (target - now)
            if abs(target - now) < s.queue_push_us / 2:
                now = target  # lands on it, as a destination's push would not move the last bit
            if target == 0 and now < s.queue_floor_us:
                self.link_waits.pop(lid, None)
            else:
                self.link_waits[lid] = now

    def _held_saturated(self, own: list[OwnFlow]) -> set[tuple[str, str]]:
        """The own flows saturated now or in the last `queue_hold_periods`: a
        TCP flow dips under the saturation threshold after a loss, and a
        wait added and taken away under it (tens of ms of delay) reorders
        its packets and makes the dip worse (measured in the Kollaps
        scenario: 12-20 seconds of stalls per run against 5-12)."""
        until = self.period + self.settings.queue_hold_periods
        for f in own:
            if f.saturated:
                self._saturated_until[(f.src, f.dst)] = until
        for key in [k for k, end in self._saturated_until.items() if end < self.period]:
            del self._saturated_until[key]
        return set(self._saturated_until)

    def _push_waits(
        self, full_links: Mapping[int, frozenset], saturated: set[tuple[str, str]], drops: Mapping[int, float]
    ) -> None:
        """Each own destination's wait: the sum over the full links of its
        path of their standing queues, but for a link holding its own flow
        back; none for a flow saturated lately (its backlog waits in its own
        class, and its delay is not moved under it).  Its drops: those of
        the same links compounded, saturated or not (a loss reorders
        nothing; a flow held back by its own access link loses packets
        where it crosses a full link, as c3 of the Kollaps scenario does in
        the reference).  Only the destinations across
        a link whose wait (to the millisecond) or held flows changed, or
        whose flow became saturated or stopped being so, are looked at
        again, and all when the paths changed (a new timeline state, new
        cores)."""
        now = {lid: (round(w / 1000), full_links.get(lid, frozenset())) for lid, w in self.link_waits.items()}
        changed = {lid for lid in now.keys() | self._link_state.keys() if now.get(lid) != self._link_state.get(lid)}
        flipped = saturated ^ self._saturated
        fresh = self._crossing_of is not self._view
        if not changed and not flipped and not fresh:
            return
        self._link_state, self._saturated = now, saturated
        crossing, paths = self._crossing_index()
        keys = {key for lid in (now.keys() | changed if fresh else changed) for key in crossing.get(lid, ())}
        keys |= flipped
        if fresh:  # a destination whose new path no longer crosses a full link
            keys.update(key for key, override in self.applied.items() if override.queue_us or override.drop_ratio)
        s = self.settings
        changes: dict[str, dict[str, Override | None]] = {}
        for key in keys:
            crossed = [lid for lid in paths.get(key, ()) if key not in full_links.get(lid, ())]
            wait = sum(w for lid in crossed if (w := self.link_waits.get(lid)) is not None)
            if key in saturated:
                wait = 0
            wait = int(round(wait))
            keep = 1.0
            for lid in crossed:
                keep *= 1.0 - drops.get(lid, 0.0)
            drop = round(1.0 - keep, 6)
            before = self.applied.get(key, Override())
            moved = abs(wait - before.queue_us)
            small = moved == 0 or (wait and moved < max(s.queue_push_us, s.queue_push_ratio * before.queue_us))
            if small and drop == before.drop_ratio:
                continue
            new = replace(before, queue_us=before.queue_us if small else wait, drop_ratio=drop)
            changes.setdefault(key[0], {})[key[1]] = None if new == Override() else new
            self._set_applied(key, new)
        for src, per_dst in changes.items():
            self._apply(src, per_dst)

    def _crossing_index(self):
        """(link -> own destinations whose path crosses it, destination -> its
        path's links), made when first needed after the state or the cores changed."""
        if self._crossing is None or self._crossing_of is not self._view:
            crossing: dict[int, list[tuple[str, str]]] = {}
            paths: dict[tuple[str, str], tuple[int, ...]] = {}
            for src in self.owned:
                for dst, path in self._configured(src).items():
                    if path is None:
                        continue
                    paths[(src, dst)] = path.link_ids
                    for lid in path.link_ids:
                        crossing.setdefault(lid, []).append((src, dst))
            self._crossing, self._crossing_of = (crossing, paths), self._view
        return self._crossing

    def _set_applied(self, key, override: Override) -> None:
        if override == Override():
            self.applied.pop(key, None)
        else:
            self.applied[key] = override

    # ---- what the status API shows -----------------------------------------------

    def _record(self, saturated, flows, offered, rates, link_loss, flow_loss) -> None:
        view = self._view
        if view is None:  # a tick made it before calling this
            return
        rows = []
        for flow in flows:
            fid = flow.flow_id
            local = fid[0] not in ("peer", BACKGROUND)
            applied = self.applied.get(fid) if local else None
            if fid[0] == BACKGROUND:  # named by the link it crosses
                src, dst = BACKGROUND, "{} -> {}".format(*view.ends.get(fid[1], ("?", "?")))
            elif local:
                src, dst = fid
            else:
                src = self._sender_names.get(fid[1], f"sender {fid[1]}")
                dst = view.ends.get(flow.link_ids[-1], ("?", "?"))[1]
            rows.append(
                {
                    "src": src,
                    "dst": dst,
                    "local": local,
                    "link_ids": list(flow.link_ids),
                    "rtt_us": flow.rtt_us,
                    "measured_bps": offered[fid],
                    "share_bps": rates.get(fid),
                    "allowed_bps": (applied.rate_bps if applied and applied.rate_bps else flow.path_rate_bps)
                    if local
                    else None,
                    "saturated": saturated[fid],
                    "congestion_loss_ratio": flow_loss.get(fid, 0.0),
                    "queue_us": applied.queue_us if applied else 0,
                    "queue_drop_ratio": applied.drop_ratio if applied else 0.0,
                }
            )
        load: dict[int, int] = {}
        for flow in flows:
            for lid in flow.link_ids:
                load[lid] = load.get(lid, 0) + offered[flow.flow_id]
        links = []
        for lid in sorted(load):
            cap = view.capacity.get(lid)
            src, dst = view.ends.get(lid, ("?", "?"))
            links.append(
                {
                    "id": lid,
                    "src": src,
                    "dst": dst,
                    "capacity_bps": cap,
                    "load_bps": load[lid],
                    "utilisation": None if not cap else load[lid] / cap,
                    "oversubscribed_loss_ratio": link_loss.get(lid, 0.0),
                    "standing_queue_us": int(self.link_waits.get(lid, 0)),
                }
            )
        self.last = {"flows": rows, "links": links}

    def status(self) -> dict:
        return {"enabled": True, "period": self.period, **self.last, "metadata": self.bus.status()}

    def clear(self) -> None:
        """Drop every override (the run goes back to per-pair shaping)."""
        by_src: dict[str, dict[str, Override | None]] = {}
        for src, dst in self.applied:
            by_src.setdefault(src, {})[dst] = None
        self.applied.clear()
        self.link_waits.clear()
        self._link_state, self._saturated, self._saturated_until = {}, set(), {}
        for src, per_dst in by_src.items():
            self._apply(src, per_dst)
