"""Collapsing a topology: one end-to-end path between every pair of instances.

Entry points:
- `collapse(experiment, sources=None)`: the `NetworkState` at t=0;
- `unreachable_pairs(experiment)`: instance pairs with no route at t=0;
- `NetworkState`, also what every step of `collapsar.timeline` holds.

How (see `collapsar.routing` and `collapsar.pathattrs`): the experiment is
expanded into an instance-level graph with stable link ids
(`collapsar.graph`); shortest paths from the source instances are found with
scipy's Dijkstra and kept implicitly as "entering link" matrices; a
`collapsar.model.Path` is made only when asked for.  Instances are endpoints,
never transit: a path never crosses another instance.  The metric is the
experiment's `path_metric`: `latency` (sum of delays; fewer hops win ties) or
`hops` (hop count; lower latency wins ties).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from collapsar.conditions import NO_RATE, Conditions
from collapsar.errors import CollapsarError
from collapsar.graph import RunGraph
from collapsar.impairments import NO_EXTRAS, Extras, compose
from collapsar.model import DISTRIBUTIONS, Experiment, LinkProps, Path
from collapsar.pathattrs import fold_core, fold_sinks, fold_walk, walk
from collapsar.routing import Router


class LinkState(NamedTuple):
    src: str
    dst: str
    props: LinkProps
    present: bool  # its link is present and both its ends are


class NetworkState:
    """The collapsed network at one moment, with paths from `sources` only."""

    def __init__(
        self,
        graph: RunGraph,
        cond: Conditions,
        rows: np.ndarray,
        in_core: np.ndarray,
        hops: np.ndarray,
        in_sink: np.ndarray,
    ):
        self.graph = graph
        self.conditions = cond
        self._rows = rows
        self._row_of = {graph.instances[i]: r for r, i in enumerate(rows)}
        self.in_core, self.hops, self.in_sink = in_core, hops, in_sink
        self._links: dict[int, LinkState] | None = None

    # ---- what is there ----------------------------------------------------------

    @property
    def instances(self) -> tuple[str, ...]:
        """Instances present now, in run order."""
        on = self.conditions.instance_on
        return tuple(name for name, here in zip(self.graph.instances, on) if here)

    @property
    def sources(self) -> tuple[str, ...]:
        """Instances whose outgoing paths this state holds (present or not)."""
        return tuple(self.graph.instances[i] for i in self._rows)

    def status(self, instance: str) -> str:
        """'up' or 'disconnected' for a present instance."""
        index = self._instance(instance)
        if not self.conditions.instance_on[index]:
            raise CollapsarError(f"instance {instance!r} is not present at this time")
        return "disconnected" if self.conditions.disconnected[index] else "up"

    @property
    def links(self) -> dict[int, LinkState]:
        """Every link id of the run: ends, current properties, presence now."""
        if self._links is None:
            active = self.conditions.link_active()
            self._links = {
                link.id: LinkState(link.src, link.dst, self.conditions.props(link.id), bool(active[link.id]))
                for link in self.graph.links
            }
        return self._links

    # ---- paths --------------------------------------------------------------------

    def path(self, src: str, dst: str) -> Path | None:
        """The path from `src` to `dst`; None if unreachable or cut."""
        row = self._row(src)
        col = self._instance(dst)
        if not self._exists(np.array([row]), np.array([col]))[0, 0]:
            return None
        ids = walk(self.in_core[row], int(self.in_sink[row, col]), self.graph.link_src, self.graph.bridge_count)
        folded = fold_walk(ids, self.conditions)
        return _path(
            src,
            dst,
            ids,
            (folded.delay_us, folded.jitter_us(), folded.keep, folded.rate_bps, folded.dist_code, folded.extra_sig),
            self.conditions,
        )

    def paths(self, sources: Iterable[str] | None = None) -> Iterator[Path]:
        """Every existing path from `sources` (default: all of this state's),
        source by source in run order, then destination in run order."""
        names = self.sources if sources is None else tuple(sources)
        rows = np.array([self._row(name) for name in names], np.int64)
        if rows.size == 0:
            return
        core = fold_core(self.in_core[rows], self.hops[rows], self.conditions)
        folded = fold_sinks(core, self.in_sink[rows], self.conditions)
        exists = self._exists(rows, np.arange(self.graph.instance_count))
        jitter = folded.jitter_us()
        link_src, bridges = self.graph.link_src, self.graph.bridge_count
        for k, col in zip(*np.nonzero(exists)):
            row = rows[k]
            yield _path(
                self.graph.instances[self._rows[row]],
                self.graph.instances[col],
                walk(self.in_core[row], int(self.in_sink[row, col]), link_src, bridges),
                (
                    folded.delay_us[k, col],
                    jitter[k, col],
                    folded.keep[k, col],
                    folded.rate_bps[k, col],
                    folded.dist_code[k, col],
                    folded.extra_sig[k, col],
                ),
                self.conditions,
            )

    def cut_off(self, candidates: Iterable[str]) -> set[str]:
        """Those of `candidates` that no other source of this state reaches:
        absent, disconnected, or without a route from any of them."""
        names = list(candidates)
        if not names:
            return set()
        cols = np.array([self._instance(name) for name in names], np.int64)
        reach = self._exists(np.arange(len(self._rows)), cols)
        reach &= self._rows[:, None] != cols[None, :]  # an instance's path to itself does not count
        return {name for name, reached in zip(names, reach.any(axis=0)) if not reached}

    def unreachable(self) -> list[tuple[str, str]]:
        """Pairs of present instances (from this state's sources) with no route.
        Deliberate cuts (disconnect, partition) are not counted here, though
        `path()` is None for them too."""
        on = self.conditions.instance_on
        rows = np.flatnonzero(on[self._rows])
        missing = (self.in_sink[rows] < 0) & on[None, :]
        missing[np.arange(len(rows)), self._rows[rows]] = False
        names = self.graph.instances
        return [(names[self._rows[rows[r]]], names[c]) for r, c in zip(*np.nonzero(missing))]

    def exists(self) -> np.ndarray:
        """(sources, instances) mask of pairs that have a path now."""
        cond = self.conditions
        if not cond.partitions and not cond.disconnected.any():
            return self.in_sink >= 0
        return self._exists(np.arange(len(self._rows)), np.arange(self.graph.instance_count))

    def _exists(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        cond = self.conditions
        src = self._rows[rows]
        reach = self.in_sink[np.ix_(rows, cols)] >= 0
        if not cond.partitions and not cond.disconnected.any():
            return reach
        cut = cond.disconnected[src][:, None] | cond.disconnected[cols][None, :]
        for group in cond.partition_group():
            a, b = group[src][:, None], group[cols][None, :]
            cut |= (a >= 0) & (b >= 0) & (a != b)
        return reach & ~cut

    def _row(self, src: str) -> int:
        if src not in self._row_of:
            self._instance(src)
            raise CollapsarError(f"paths from {src!r} were not computed (sources: {', '.join(self.sources) or 'none'})")
        return self._row_of[src]

    def _instance(self, name: str) -> int:
        if name not in self.graph.instance_index:
            raise CollapsarError(f"no instance {name!r} in this experiment")
        return self.graph.instance_index[name]


def loss_of(keep: float) -> float:
    """Loss ratio from the product of (1 - loss); rounded to 1e-12 so that
    10% then 20% reads 0.28, not 0.27999999999999997."""
    return round(1.0 - keep, 12)


def _path(src: str, dst: str, link_ids: tuple[int, ...], folded: tuple, cond: Conditions) -> Path:
    """A Path from one path's folded properties (numpy's or Python's numbers:
    delay, jitter, keep, rate, distribution code, extras signature); its
    extras, when its links have any, are composed from theirs."""
    delay_us, jitter_us, keep, rate_bps, dist_code, extra_sig = folded
    rate = int(rate_bps)
    loss, extras = loss_of(float(keep)), NO_EXTRAS
    in_order = cond.graph.experiment.settings.in_order
    if extra_sig or (in_order and jitter_us):
        loss, extras = compose([_link_terms(cond, link) for link in link_ids], in_order)
    return Path(
        src=src,
        dst=dst,
        delay_us=int(delay_us),
        jitter_us=int(jitter_us),
        loss_ratio=loss,
        rate_bps=None if rate == NO_RATE else rate,
        link_ids=link_ids,
        distribution=DISTRIBUTIONS[dist_code],
        extras=extras,
    )


def _link_terms(cond: Conditions, link: int) -> tuple[float, int, int | None, Extras]:
    """What `collapsar.impairments.compose` needs of one link."""
    rate = int(cond.rate_bps[link])
    return float(cond.loss_ratio[link]), int(cond.jitter_us[link]), None if rate == NO_RATE else rate, cond.extras[link]


def source_rows(graph: RunGraph, sources: Iterable[str] | None) -> np.ndarray:
    """Instance indices for `sources` (None: every instance of the run)."""
    if sources is None:
        return np.arange(graph.instance_count, dtype=np.int64)
    rows = []
    for name in sources:
        if name not in graph.instance_index:
            raise CollapsarError(
                f"no instance {name!r} in this experiment; expected one of "
                f"{', '.join(graph.instances[:8])}"
                f"{' ...' if graph.instance_count > 8 else ''}"
            )
        rows.append(graph.instance_index[name])
    return np.array(sorted(set(rows)), np.int64)


def collapse(experiment: Experiment, sources: Iterable[str] | None = None) -> NetworkState:
    """The collapsed network at t=0 (before any event)."""
    graph = RunGraph(experiment)
    cond = Conditions(graph)
    rows = source_rows(graph, sources)
    router = Router(graph, rows, experiment.settings.path_metric)
    router.initial(cond)
    return NetworkState(graph, cond, rows, *router.snapshot())


def unreachable_pairs(experiment: Experiment) -> list[tuple[str, str]]:
    """Instance pairs (src, dst) with no route at t=0, in run order."""
    return collapse(experiment).unreachable()
