"""Shortest paths from a set of source instances, kept up to date across events.

The graph seen by the shortest-path search has two kinds of nodes:
- the *core*: every bridge, plus one "out" node per instance holding the
  links that leave it;
- the *sinks*: one "in" node per instance, where links into it end.
An instance is a host, not a router: splitting it this way means a path can
start and end at an instance but never cross one.

At t=0, distances to bridges come from scipy's Dijkstra over the core (run
from the sources' first-hop bridges; see `Router._distances`).  After that,
an event is applied incrementally, for all sources at once with numpy:
entries that lost a tree link are invalidated and recomputed, and shorter
ways are relaxed Bellman-Ford style from where they appear, touching only
what moved.  Paths to instances are one hop more: for each sink, the best of
its entering links (no search needed).

Path weights are exact integers held in float64:
- metric `latency`: delay * M + 1 per link (M exceeds any hop count), so equal
  latencies are won by fewer hops;
- metric `hops`: BIG + delay per link (BIG exceeds any path delay), so equal
  hop counts are won by lower latency.
Both delay and hop count of a path can be read back from its weight.
Remaining ties go to the lowest link id: each node's entering link is a
function of the current network only, so every host, whatever its share of
sources and whatever path of events led there, computes the same trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from collapsar.adjacency import Adjacency, descendants, first_best
from collapsar.conditions import Conditions
from collapsar.errors import CollapsarError
from collapsar.graph import RunGraph
from collapsar.model import LinkSetEvent

_EXACT = 2.0**52  # float64 holds every integer below this exactly
_ROW_CHUNK = 256  # sources per Dijkstra call: bounds the temporary matrices


def index_dtype(count: int) -> type:
    """The smallest signed type that holds -1..count (halves stored states)."""
    return np.int16 if count < 2**15 - 1 else np.int32


class Weights:
    """Encodes the path metric into one additive float64 weight per link."""

    def __init__(self, graph: RunGraph, metric: str):
        if metric not in ("latency", "hops"):
            raise CollapsarError(f"unknown path metric {metric!r}; expected latency or hops")
        self.metric = metric
        max_hops = graph.bridge_count + 2
        max_delay = _largest_delay(graph)
        path_delay = max_hops * max_delay
        if metric == "latency":
            self.unit = float(max_hops + 1)
            largest = (path_delay + 1) * self.unit
        else:
            self.unit = float(path_delay + 1)
            largest = max_hops * self.unit + path_delay
        if largest >= _EXACT:
            raise CollapsarError(
                f"link delays up to {max_delay}us over {max_hops} hops exceed the exact range of path weights"
            )

    def of(self, cond: Conditions) -> np.ndarray:
        delay = cond.delay_us.astype(np.float64)
        if self.metric == "latency":
            weight = delay * self.unit + 1.0
        else:
            weight = delay + self.unit
        return np.where(cond.link_active(), weight, np.inf)

    def hops(self, dist: np.ndarray) -> np.ndarray:
        finite = np.isfinite(dist)
        safe = np.where(finite, dist, 0.0)
        if self.metric == "latency":
            hops = np.fmod(safe, self.unit)
        else:
            hops = np.floor(safe / self.unit)
        return hops.astype(np.int64)


def _largest_delay(graph: RunGraph) -> int:
    largest = 1
    for spec in graph.specs:
        for props in (spec.up, spec.down):
            if props is not None:
                largest = max(largest, props.delay_us)
    for event in graph.experiment.events:
        if isinstance(event, LinkSetEvent):
            for changes in (event.up, event.down):
                largest = max(largest, int(changes.get("delay_us", 0)))
    return largest


@dataclass
class CoreChange:
    """What one `Router.advance` did to the bridge entries (flat `row * B + bridge`)."""

    touched: np.ndarray  # entries whose entering link was chosen again
    link_changed: np.ndarray  # ... and got a different one
    dist_changed: np.ndarray  # entries whose path weight changed
    weight_changed: np.ndarray  # link ids whose weight (or presence) changed


class Router:
    """The shortest-path trees of the source rows, updated event by event.

    Arrays (S source rows, B bridges, I instances): `dist` (S, B) path
    weights; `in_core` (S, B) and `in_sink` (S, I) entering link ids (-1:
    unreachable); `hops` (S, B) hop counts of bridges.  The entering link of
    a node is canonical: among the links into it that achieve its shortest
    distance, the lowest id.  So the trees depend only on the current
    network, not on how it got there, and an event only needs to revisit the
    entries whose distance or candidate links changed.  `in_core`, `hops` and
    `in_sink` are replaced rather than mutated once handed out by `snapshot()`.
    """

    def __init__(self, graph: RunGraph, sources: np.ndarray, metric: str):
        self.graph = graph
        self.weights = Weights(graph, metric)
        self.rows = np.asarray(sources, np.int64)  # instance index per row
        s, b, i = len(self.rows), graph.bridge_count, graph.instance_count
        link_type = index_dtype(len(graph.links))
        self.dist = np.full((s, b), np.inf)
        self.in_core: np.ndarray = np.full((s, b), -1, link_type)
        self.hops: np.ndarray = np.zeros((s, b), index_dtype(b + 2))
        self.in_sink: np.ndarray = np.full((s, i), -1, link_type)
        self.w = np.full(len(graph.links), np.inf)
        src, dst = graph.link_src, graph.link_dst
        self.is_core = dst < b
        self.out_core = Adjacency(np.where(self.is_core & (src < b), src, -1), b)
        self.out_sink = Adjacency(np.where(~self.is_core & (src < b), src, -1), b)
        self.into_core = Adjacency(np.where(self.is_core, dst, -1), b)
        self.into_sink = Adjacency(np.where(self.is_core, -1, dst - b), i)
        self._shared: set[str] = set()

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._shared = {"in_core", "hops", "in_sink"}
        return self.in_core, self.hops, self.in_sink

    def _writable(self, name: str) -> np.ndarray:
        if name in self._shared:
            setattr(self, name, getattr(self, name).copy())
            self._shared.discard(name)
        return getattr(self, name)

    # ---- choosing entering links ------------------------------------------------

    def _reach(self, rows: np.ndarray, src: np.ndarray) -> np.ndarray:
        """Path weight from each row's source to node `src` (a bridge, or an
        instance's out node: 0 for the row's own instance, else unreachable)."""
        b = self.graph.bridge_count
        bridge = src < b
        reach = np.full(len(rows), np.inf)
        reach[bridge] = self.dist[rows[bridge], src[bridge]]
        reach[~bridge & (src - b == self.rows[rows])] = 0.0
        return reach

    def _choose(self, rows: np.ndarray, nodes: np.ndarray, into: Adjacency) -> tuple[np.ndarray, np.ndarray]:
        owner, links = into.expand(nodes)
        cand = self._reach(rows[owner], self.graph.link_src[links]) + self.w[links]
        return first_best(cand, owner, links, len(nodes))

    def _choose_all(self, into: Adjacency, width: int, target: np.ndarray) -> None:
        """Choose the entering link of every node for every row: one gather per
        link over all rows, then a per-node minimum (links are grouped by node)."""
        graph, b = self.graph, self.graph.bridge_count
        links = into.ids
        nodes = np.flatnonzero(into.degree)
        if links.size == 0:
            target[:] = -1
            return
        src = graph.link_src[links]
        own = np.flatnonzero(src >= b)
        starts = into.start[nodes]
        ties_at = np.arange(links.size)
        for start in range(0, len(self.rows), _ROW_CHUNK):
            rows = np.arange(start, min(start + _ROW_CHUNK, len(self.rows)))
            reach = np.hstack([self.dist[rows], np.full((len(rows), 1), np.inf)])
            cand = reach[:, np.minimum(src, b)] + self.w[links][None, :]
            # A link leaving an instance only starts that instance's own paths.
            mine = self.rows[rows][:, None] == (src[own] - b)[None, :]
            at_row, at_link = np.nonzero(mine)
            cand[at_row, own[at_link]] = self.w[links[own[at_link]]]
            best = np.minimum.reduceat(cand, starts, axis=1)
            tie = cand == np.repeat(best, into.degree[nodes], axis=1)
            first = np.minimum.reduceat(np.where(tie, ties_at, links.size), starts, axis=1)
            block = np.full((len(rows), width), -1, np.int64)
            block[:, nodes] = np.where(np.isfinite(best), links[first], -1)
            target[rows] = block

    def rechoose_sinks(self, entries: np.ndarray) -> np.ndarray:
        """Choose again the entering link of sink entries (flat `row * I + instance`);
        returns the links they had."""
        if entries.size == 0:
            return np.zeros(0, np.int64)
        count = self.graph.instance_count
        rows, cols = np.divmod(entries, count)
        _, chosen = self._choose(rows, cols, self.into_sink)
        chosen[cols == self.rows[rows]] = -1  # no path from an instance to itself
        flat = self._writable("in_sink").ravel()
        old = flat[entries].astype(np.int64)
        flat[entries] = chosen
        return old

    # ---- computing and updating -------------------------------------------------

    def initial(self, cond: Conditions) -> None:
        """Every tree from scratch (t=0)."""
        graph, b = self.graph, self.graph.bridge_count
        self.w = self.weights.of(cond)
        self._distances()
        self._choose_all(self.into_core, b, self._writable("in_core"))
        self._writable("hops")[:] = self.weights.hops(self.dist)
        in_sink = self._writable("in_sink")
        self._choose_all(self.into_sink, graph.instance_count, in_sink)
        in_sink[np.arange(len(self.rows)), self.rows] = -1

    def _distances(self) -> None:
        """Distances to every bridge from scratch.  A source's paths all start
        with one of its own links to a bridge and go on between bridges only,
        so Dijkstra runs from those first-hop bridges (fewer than the sources
        when several share one) and each source takes the best first hop."""
        graph, b = self.graph, self.graph.bridge_count
        first = np.flatnonzero(self.is_core & (graph.link_src >= b) & np.isfinite(self.w))
        row = self.row_of_instance()[graph.link_src[first] - b]
        first, row = first[row >= 0], row[row >= 0]
        homes, home_of = np.unique(graph.link_dst[first], return_inverse=True)
        self.dist[:] = np.inf
        if homes.size == 0:
            return
        matrix = self._core_matrix()
        for start in range(0, homes.size, _ROW_CHUNK):
            chunk = slice(start, start + _ROW_CHUNK)
            from_home = dijkstra(matrix, directed=True, indices=homes[chunk])[:, :b]
            pick = (home_of >= start) & (home_of < start + from_home.shape[0])
            np.minimum.at(self.dist, row[pick], from_home[home_of[pick] - start] + self.w[first[pick]][:, None])

    def row_of_instance(self) -> np.ndarray:
        rows = np.full(self.graph.instance_count, -1, np.int64)
        rows[self.rows] = np.arange(len(self.rows))
        return rows

    def _core_matrix(self) -> csr_matrix:
        """CSR over core nodes, keeping the lightest of parallel links
        (csr_matrix would add them up)."""
        graph = self.graph
        size = graph.bridge_count + graph.instance_count
        ids = np.flatnonzero(self.is_core & np.isfinite(self.w))
        src, dst, w = graph.link_src[ids], graph.link_dst[ids], self.w[ids]
        order = np.lexsort((w, dst, src))
        src, dst, w = src[order], dst[order], w[order]
        first = np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])] if ids.size else []
        return csr_matrix((w[first], (src[first], dst[first])), shape=(size, size))

    def advance(self, cond: Conditions) -> CoreChange:
        """Bring the trees up to `cond`: invalidate what lost a tree link,
        relax from what gained a shorter one, choose entering links again
        where anything moved.  Sinks are left to `rechoose_sinks`."""
        graph, b = self.graph, self.graph.bridge_count
        new_w = self.weights.of(cond)
        changed = np.flatnonzero(new_w != self.w)
        core = changed[self.is_core[changed]]
        old_w, self.w = self.w, new_w
        before = self.dist.copy()
        flat = self.dist.ravel()
        touched, frontier = [], []
        worse = core[new_w[core] > old_w[core]]
        if worse.size:  # entries below a link that got worse lose their distance
            rows, which = np.nonzero(self.in_core[:, graph.link_dst[worse]] == worse[None, :])
            lost = descendants(rows * b + graph.link_dst[worse[which]], self.in_core, self.out_core, graph.link_dst)
            flat[lost] = np.inf
            best, _ = self._choose(*np.divmod(lost, b), self.into_core)
            flat[lost] = best
            touched.append(lost)
            frontier.append(lost[np.isfinite(best)])
        better = core[new_w[core] < old_w[core]]
        if better.size:  # a link that got better may offer a shorter way in
            rows = np.repeat(np.arange(len(self.rows)), better.size)
            links = np.tile(better, len(self.rows))
            entry = rows * b + graph.link_dst[links]
            cand = self._reach(rows, graph.link_src[links]) + new_w[links]
            touched.append(entry[cand <= flat[entry]])
            gain = cand < flat[entry]
            np.minimum.at(flat, entry[gain], cand[gain])
            frontier.append(entry[gain])
        if frontier:
            touched.extend(self._relax(np.unique(np.concatenate(frontier))))
        entries = np.unique(np.concatenate(touched)) if touched else np.zeros(0, np.int64)
        if entries.size == 0:  # nothing moved: keep sharing the arrays of the last state
            return CoreChange(entries, entries, entries, changed)
        _, chosen = self._choose(*np.divmod(entries, b), self.into_core)
        in_core = self._writable("in_core").ravel()
        old = in_core[entries].astype(np.int64)
        in_core[entries] = chosen
        self._writable("hops").ravel()[entries] = self.weights.hops(flat[entries])
        return CoreChange(entries, entries[old != chosen], entries[flat[entries] != before.ravel()[entries]], changed)

    def _relax(self, frontier: np.ndarray) -> list[np.ndarray]:
        """Bellman-Ford from the entries whose distance dropped, all rows at
        once; returns the entries reached without losing (ties included)."""
        graph, b = self.graph, self.graph.bridge_count
        flat = self.dist.ravel()
        reached = [frontier]
        while frontier.size:
            row, node = np.divmod(frontier, b)
            owner, links = self.out_core.expand(node)
            entry = row[owner] * b + graph.link_dst[links]
            cand = flat[frontier[owner]] + self.w[links]
            current = flat[entry]
            reached.append(entry[cand <= current])
            gain = cand < current
            np.minimum.at(flat, entry[gain], cand[gain])
            frontier = np.unique(entry[gain])
        return reached
