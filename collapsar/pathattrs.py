"""End-to-end properties of shortest-path trees, for many sources at once.

Routes are kept implicitly (see `collapsar.routing`): for each source row,
`in_core[r, b]` is the id of the link entering bridge `b` on the path from
that source, and `in_sink[r, i]` the id of the link entering instance `i`.
Walking those ids backwards gives a path; this module computes the folded
properties of every path without walking, by dynamic programming over hop
depth: a bridge at depth d gets `fold(props of its parent, props of its
entering link)`, and the parent (depth d-1) is already done, for all sources
in one numpy operation per depth.  One path given by its links
(`fold_walk`, for `NetworkState.path`) takes the same step (`Folded.then`)
hop by hop, in plain numbers.

The folds (the `collapsar.model.Path` contract):
- delay: sum of link delays;
- jitter: sqrt of the sum of squared jitters, rounded to the microsecond
  (independent variations add their variances);
- loss: 1 - prod(1 - loss_i) (a packet survives each link independently);
- rate: min of the link rates; unlimited links do not count;
- distribution: that of the link with the largest jitter, the first one on
  the path if several share it; "normal" when no link has jitter;
- extras (burst loss, reordering, queue, ...: `collapsar.impairments`): the
  sum, modulo 2^64, of a number naming each link's (0 for none), so a fold
  tells whether a path has any and whether they changed; the path's own
  extras are composed from its links when it is built (`collapsar.collapse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collapsar.conditions import NO_RATE, Conditions
from collapsar.impairments import SIGNATURE_MASK

# One folded property of many paths (an array, one entry per path) or of
# one path folded on its own (a plain number: numpy's cost per call would
# be most of the work for a handful of hops).
Values = Any
# The fold of an empty path, property by property, and each one's array type.
_START = (0, 0, 1.0, int(NO_RATE), 0, 0, 0)
_DTYPES = (np.int64, np.int64, np.float64, np.int64, np.int64, np.int8, np.uint64)


@dataclass
class Folded:
    """Folded properties, one value per property: arrays all of the same
    shape, or plain numbers."""

    delay_us: Values  # int64
    jitter_sq: Values  # int64, sum of squared jitters (us^2)
    keep: Values  # float64, prod(1 - loss)
    rate_bps: Values  # int64, NO_RATE: unlimited
    max_jitter: Values  # int64
    dist_code: Values  # int8
    extra_sig: Values  # uint64, sum of the links' Extras.signature()

    @classmethod
    def identity(cls, shape: tuple[int, ...] | None) -> Folded:
        """The fold of an empty path, the start of every path: arrays of
        `shape`, or plain numbers (None)."""
        if shape is None:
            return cls(*_START)
        return cls(*(np.full(shape, start, dtype) for start, dtype in zip(_START, _DTYPES)))

    def then(
        self,
        delay_us: Values,
        jitter_us: Values,
        loss_ratio: Values,
        rate_bps: Values,
        dist_code: Values,
        extra_sig: Values,
    ) -> Folded:
        """These paths, each followed by one more link with these properties
        (arrays like the fold's, or numbers): the fold, written once."""
        # Strictly larger: on a tie the link nearer the source keeps the say.
        takes_over = jitter_us > self.max_jitter
        return Folded(
            self.delay_us + delay_us,
            self.jitter_sq + jitter_us * jitter_us,
            self.keep * (1.0 - loss_ratio),
            _choose(rate_bps < self.rate_bps, rate_bps, self.rate_bps),  # the smaller
            _choose(takes_over, jitter_us, self.max_jitter),
            _choose(takes_over, dist_code, self.dist_code),
            _sum_signatures(self.extra_sig, extra_sig),
        )

    def jitter_us(self) -> Values:
        return np.rint(np.sqrt(self.jitter_sq)).astype(np.int64)

    def put_rows(self, index, other: Folded) -> None:
        for mine, theirs in zip(self.arrays(), other.arrays()):
            mine[index] = theirs

    def arrays(self) -> tuple[Values, ...]:
        return (
            self.delay_us,
            self.jitter_sq,
            self.keep,
            self.rate_bps,
            self.max_jitter,
            self.dist_code,
            self.extra_sig,
        )


def _sum_signatures(a: Values, b: Values) -> Values:
    """a + b modulo 2^64: uint64 arrays wrap by themselves, plain numbers are masked."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a + b
    return (int(a) + int(b)) & SIGNATURE_MASK


def _choose(take: Values, new: Values, old: Values) -> Values:
    """`new` where `take`, else `old`: element-wise for arrays."""
    if isinstance(take, np.ndarray):
        return np.where(take, new, old)
    return new if take else old


def _links(cond: Conditions, link: Values) -> tuple[Values, ...]:
    """The properties of `link` (an id or an array of ids), in `Folded.then`'s order."""
    return (
        cond.delay_us[link],
        cond.jitter_us[link],
        cond.loss_ratio[link],
        cond.rate_bps[link],
        cond.dist_code[link],
        cond.extra_sig[link],
    )


def _extend(parent: Folded, at: np.ndarray, link: np.ndarray, cond: Conditions) -> Folded:
    """The fold of each parent (flat positions `at`) followed by one link."""
    before = Folded(*(values.ravel()[at] for values in parent.arrays()))
    return before.then(*_links(cond, link))


def fold_walk(link_ids: Sequence[int], cond: Conditions) -> Folded:
    """One path's fold from its link ids (source first), in plain numbers."""
    folded = Folded.identity(None)
    for link in zip(*(values.tolist() for values in _links(cond, np.asarray(link_ids, np.int64)))):
        folded = folded.then(*link)
    return folded


def parent_column(link_src: np.ndarray, bridge_count: int) -> np.ndarray:
    """Per link, the column of its source in a folded core array: the bridge,
    or `bridge_count` (the identity column) when it leaves an instance: only
    the path's own source instance is ever a parent."""
    return np.where(link_src < bridge_count, link_src, bridge_count)


def fold_core(in_core: np.ndarray, hops: np.ndarray, cond: Conditions) -> Folded:
    """Folded properties of the paths to every bridge, for k source rows:
    arrays of shape (k, B + 1), column B the identity (the source itself)."""
    k, bridges = in_core.shape
    folded = Folded.identity((k, bridges + 1))
    if k and bridges:
        refold_core(folded, np.arange(k * bridges), in_core, hops, cond, np.zeros((k, bridges + 1), bool))
    return folded


def fold_sinks(core: Folded, in_sink: np.ndarray, cond: Conditions) -> Folded:
    """Folded properties of the paths to instances, (k, I) like `in_sink`, whose
    rows match `core`'s; entries without an entering link are meaningless."""
    if in_sink.size == 0 or len(cond.delay_us) == 0:
        return Folded.identity(in_sink.shape)
    entries = np.arange(in_sink.size)
    folded, _ = fold_sink_entries(core, entries, in_sink.ravel().astype(np.int64), in_sink.shape[1], cond)
    return Folded(*(a.reshape(in_sink.shape) for a in folded.arrays()))


def walk(in_core_row: np.ndarray, in_sink_link: int, link_src: np.ndarray, bridge_count: int) -> tuple[int, ...]:
    """The link ids of one path, source first, from its implicit tree."""
    ids = [int(in_sink_link)]
    node = int(link_src[in_sink_link])
    while node < bridge_count:
        link = int(in_core_row[node])
        ids.append(link)
        node = int(link_src[link])
    ids.reverse()
    return tuple(ids)


def refold_core(
    core: Folded, entries: np.ndarray, in_core: np.ndarray, hops: np.ndarray, cond: Conditions, moved: np.ndarray
) -> None:
    """Fold again the bridge `entries` (flat `row * B + bridge`, closed under
    descendants), in place in `core` (k, B + 1).  `moved` (k, B + 1) comes in
    marking entries whose own entering link changed and goes out marking
    every entry whose link list changed (its own or an ancestor's)."""
    k, bridges = in_core.shape
    width = bridges + 1
    parent_col = parent_column(cond.graph.link_src, bridges)
    rows, cols = np.divmod(entries, bridges)
    depth = hops.ravel()[entries]
    order = np.argsort(depth, kind="stable")
    counts = np.bincount(depth, minlength=1)
    start = int(counts[0])  # depth 0: unreachable now, nothing to fold
    flat_in, flat_moved = in_core.ravel(), moved.ravel()
    arrays = core.arrays()
    for count in counts[1:]:
        at = order[start : start + count]
        start += int(count)
        link = flat_in[entries[at]].astype(np.int64)
        child = rows[at] * width + cols[at]
        parent = rows[at] * width + parent_col[link]
        step = _extend(core, parent, link, cond)
        for target, value in zip(arrays, step.arrays()):
            target.ravel()[child] = value
        flat_moved[child] |= flat_moved[parent]


def fold_sink_entries(
    core: Folded, entries: np.ndarray, links: np.ndarray, instance_count: int, cond: Conditions
) -> tuple[Folded, np.ndarray]:
    """Folded properties of sink `entries` (flat `row * I + instance`) entered
    by `links` (-1: none; its fold is then meaningless); returns (1-D folds,
    flat parent positions in `core`)."""
    width = core.delay_us.shape[1]
    rows = entries // instance_count
    link = np.where(links >= 0, links, 0)
    parent = rows * width + parent_column(cond.graph.link_src, width - 1)[link]
    return _extend(core, parent, link, cond), parent
