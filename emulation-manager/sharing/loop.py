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
   override removed: its capacity goes back to the others through the model.

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
from dataclasses import dataclass

from collapsar.manager.core import EmulationCore, Override
from collapsar.manager.sharing.bus import MetadataBus
from collapsar.manager.sharing.metadata import FlowReport
from collapsar.manager.sharing.model import Flow, congestion_loss, rtt_exponent, share
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
            before = self.applied.get(key)
            current = before.rate_bps if before and before.rate_bps is not None else f.path.rate_bps
            rate = self._smoothed(current, rates.get(key))
            if rate is not None and f.path.rate_bps is not None and rate >= f.path.rate_bps:
                rate = None  # the path's own rate: no override needed
            loss = round(flow_loss.get(key, 0.0) / s.loss_step) * s.loss_step if self.netem else 0.0
            new = Override(rate, min(loss, 1.0))
            if before is None:
                before = Override()
            if new.rate_bps is None or before.rate_bps is None:
                moved = new.rate_bps != before.rate_bps
            else:
                moved = abs(new.rate_bps - before.rate_bps) > s.push_ratio * before.rate_bps
            if moved or new.loss_ratio != before.loss_ratio:
                changes.setdefault(f.src, {})[f.dst] = None if new == Override() else new
                self._set_applied(key, new)
        for key in [k for k in self.applied if k not in active]:
            changes.setdefault(key[0], {})[key[1]] = None  # stopped or cut: give the capacity back
            del self.applied[key]
        for src, per_dst in changes.items():
            self._apply(src, per_dst)

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
        for src, per_dst in by_src.items():
            self._apply(src, per_dst)
