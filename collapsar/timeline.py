"""The timeline: the collapsed network at t=0 and after every event time.

`build_timeline(experiment, sources)` precomputes, before a run, one `Step`
per distinct event time (events at the same time are applied together, in
order; events at t=0 belong to step 0).  Each step carries its `state` (a
`collapsar.collapse.NetworkState`) and `changed`: the (src, dst) pairs whose
path appeared, disappeared, or changed a property or its link list since the
previous step, so a manager touches only those.  Step 0's `changed` holds every
pair that has a path (everything "appeared").

Only what an event can change is recomputed, for all sources at once:
`collapsar.routing` updates the shortest-path trees incrementally; the
folded path properties are redone only below tree entries whose entering
link, distance or link properties changed, and at instances entered by a
changed link; the comparison with the previous step works on numpy masks.
States share the (small-typed) tree matrices with the step before when an
event leaves them alone: a disconnect or a partition changes no tree, only
which pairs have a path.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass

import numpy as np

from collapsar.adjacency import descendants
from collapsar.collapse import NetworkState, source_rows
from collapsar.conditions import Conditions
from collapsar.graph import RunGraph
from collapsar.model import Event, Experiment
from collapsar.pathattrs import Folded, fold_core, fold_sink_entries, refold_core
from collapsar.routing import Router

_FOLD_ROWS = 128


class ChangedPairs(Set):
    """A set of (src, dst) instance-name pairs, stored as index arrays."""

    def __init__(self, names: tuple[str, ...], rows: np.ndarray, mask: np.ndarray, index: dict[str, int] | None = None):
        self._names = names
        self._index = index if index is not None else {n: i for i, n in enumerate(names)}
        src, dst = np.nonzero(mask)
        self._src = rows[src]
        self._dst = dst
        self._keys = self._src * len(names) + self._dst  # sorted: row-major nonzero

    def __len__(self) -> int:
        return int(self._keys.size)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        names = self._names
        return ((names[s], names[d]) for s, d in zip(self._src.tolist(), self._dst.tolist()))

    def __contains__(self, pair: object) -> bool:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return False
        src, dst = (self._index.get(name) for name in pair)
        if src is None or dst is None:
            return False
        key = src * len(self._names) + dst
        at = int(np.searchsorted(self._keys, key))
        return at < self._keys.size and int(self._keys[at]) == key

    def __repr__(self) -> str:
        return f"ChangedPairs({len(self)} pairs)"


@dataclass(frozen=True)
class Step:
    at_us: int
    events: tuple[Event, ...]
    state: NetworkState
    changed: ChangedPairs


class Timeline:
    def __init__(self, steps: list[Step]):
        self.steps: tuple[Step, ...] = tuple(steps)
        self._times = [step.at_us for step in self.steps]

    def state_at(self, at_us: int) -> NetworkState:
        """The state in force at `at_us`: that of the last step at or before it."""
        if at_us < 0:
            raise ValueError(f"time must not be negative, got {at_us}us")
        return self.steps[bisect.bisect_right(self._times, at_us) - 1].state


def _event_groups(events: Iterable[Event]) -> list[tuple[int, list[Event]]]:
    groups: list[tuple[int, list[Event]]] = [(0, [])]
    for event in events:
        if event.at_us != groups[-1][0]:
            groups.append((event.at_us, []))
        groups[-1][1].append(event)
    return groups


def _differs(a: Folded, b: Folded) -> np.ndarray:
    return (
        (a.delay_us != b.delay_us)
        | (a.jitter_us() != b.jitter_us())
        | (a.keep != b.keep)
        | (a.rate_bps != b.rate_bps)
        | (a.dist_code != b.dist_code)
        | (a.extra_sig != b.extra_sig)
    )


def _props_changed(old: Conditions, new: Conditions) -> np.ndarray:
    return np.flatnonzero(
        (old.delay_us != new.delay_us)
        | (old.jitter_us != new.jitter_us)
        | (old.loss_ratio != new.loss_ratio)
        | (old.rate_bps != new.rate_bps)
        | (old.dist_code != new.dist_code)
        | (old.extra_sig != new.extra_sig)
    )


class _Builder:
    """Walks the events, keeping the folded properties of every path current."""

    def __init__(self, experiment: Experiment, sources: Iterable[str] | None):
        self.graph = RunGraph(experiment)
        self.rows = source_rows(self.graph, sources)
        self.router = Router(self.graph, self.rows, experiment.settings.path_metric)
        self.cond = Conditions(self.graph)

    def _state(self) -> NetworkState:
        return NetworkState(self.graph, self.cond.copy(), self.rows, *self.router.snapshot())

    def first(self, events: list[Event]) -> Step:
        for event in events:
            self.cond.apply(event)
        self.router.initial(self.cond)
        state = self._state()
        rows, bridges = state.in_core.shape
        # Only the folds to bridges are kept; a path's own fold is one link more.
        self.core = Folded.identity((rows, bridges + 1))
        for start in range(0, rows, _FOLD_ROWS):  # in slices: bounds the temporaries
            part = slice(start, start + _FOLD_ROWS)
            self.core.put_rows(part, fold_core(state.in_core[part], state.hops[part], self.cond))
        self.exists = state.exists()
        changed = ChangedPairs(self.graph.instances, self.rows, self.exists, self.graph.instance_index)
        return Step(0, tuple(events), state, changed)

    def next(self, at_us: int, events: list[Event]) -> Step:
        graph, router = self.graph, self.router
        b, count = graph.bridge_count, graph.instance_count
        old_cond = self.cond
        self.cond = old_cond.copy()
        for event in events:
            self.cond.apply(event)
        change = router.advance(self.cond)
        altered = _props_changed(old_cond, self.cond)
        core_links = altered[router.is_core[altered]]
        # Bridge entries whose folded path differs: a new entering link, a new
        # distance, an entering link with new properties; then all below them.
        seeds = [change.link_changed, change.dist_changed]
        if core_links.size:
            rows, which = np.nonzero(router.in_core[:, graph.link_dst[core_links]] == core_links[None, :])
            seeds.append(rows * b + graph.link_dst[core_links[which]])
        refold = descendants(np.concatenate(seeds), router.in_core, router.out_core, graph.link_dst)
        # Sinks to look at again: below a refolded bridge, or entered by a
        # link whose weight or properties changed (for every source).
        owner, links = router.out_sink.expand(refold % b)
        sink_links = np.union1d(altered, change.weight_changed)
        sink_links = sink_links[~router.is_core[sink_links]]
        columns = np.unique(graph.link_dst[sink_links] - b)
        entries = np.unique(
            np.concatenate(
                [
                    (refold // b)[owner] * count + graph.link_dst[links] - b,
                    (np.arange(len(self.rows))[:, None] * count + columns[None, :]).ravel(),
                ]
            )
        )
        # Their paths as they were, folded before the bridges are refolded.
        old_links = router.in_sink.ravel()[entries].astype(np.int64)
        previous, _ = fold_sink_entries(self.core, entries, old_links, count, old_cond)
        moved = np.zeros((len(self.rows), b + 1), bool)
        rows, cols = np.divmod(change.link_changed, b)
        moved[rows, cols] = True
        refold_core(self.core, refold, router.in_core, router.hops, self.cond, moved)
        router.rechoose_sinks(entries)
        new_links = router.in_sink.ravel()[entries].astype(np.int64)
        folded, parent = fold_sink_entries(self.core, entries, new_links, count, self.cond)
        differs = (old_links != new_links) | moved.ravel()[parent] | _differs(folded, previous)
        changed = np.zeros(self.exists.shape, bool)
        changed.ravel()[entries] = differs
        state = self._state()
        exists = state.exists()
        changed = (exists != self.exists) | (changed & exists)
        self.exists = exists
        pairs = ChangedPairs(graph.instances, self.rows, changed, graph.instance_index)
        return Step(at_us, tuple(events), state, pairs)


def build_timeline(experiment: Experiment, sources: Iterable[str] | None = None) -> Timeline:
    """Precompute every step; `sources` limits paths to those instances
    (e.g. one host's share), None means every instance of the run."""
    builder = _Builder(experiment, sources)
    groups = _event_groups(experiment.events)
    steps = [builder.first(groups[0][1])]
    for at_us, events in groups[1:]:
        steps.append(builder.next(at_us, events))
    return Timeline(steps)
