"""Links grouped by node, and the two sparse walks the incremental routing needs.

The routing state is a set of matrices indexed by (source row, node); an
event touches a small part of them.  The helpers here work on *entries*, the
flat index `row * width + node` of such a matrix, so that one numpy call
handles many sources at once:
- `Adjacency.expand`: every link leaving (or entering) each given node;
- `descendants`: entries below given entries in their rows' shortest-path
  trees (what loses its path when a tree link breaks, or whose properties
  follow from a changed one).
"""

from __future__ import annotations

import numpy as np


class Adjacency:
    """Link ids grouped by one of their end nodes, each group in id order."""

    def __init__(self, node_of_link: np.ndarray, node_count: int):
        """`node_of_link[l]` is the node link `l` is grouped under, -1 to leave it out."""
        kept = np.flatnonzero(node_of_link >= 0)
        order = np.argsort(node_of_link[kept], kind="stable")
        self.ids = kept[order]
        self.degree = np.bincount(node_of_link[kept], minlength=node_count)
        self.start = np.concatenate([[0], np.cumsum(self.degree)])

    def expand(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each position p of `nodes`, its links: returns (p per link, link ids),
        grouped by p in order, each group in link-id order."""
        counts = self.degree[nodes]
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(nodes)), counts)
        if total == 0:
            return owner, np.zeros(0, np.int64)
        group_start = np.cumsum(counts) - counts
        offset = np.arange(total) - np.repeat(group_start, counts)
        return owner, self.ids[np.repeat(self.start[nodes], counts) + offset]


def descendants(seeds: np.ndarray, in_link: np.ndarray, out_core: Adjacency, link_dst: np.ndarray) -> np.ndarray:
    """The seed entries and every entry below them in the trees that `in_link`
    (rows x bridges, the entering link of each bridge) describes; sorted, unique."""
    width = in_link.shape[1]
    flat_in = in_link.ravel()
    found = [np.unique(seeds)]
    frontier = found[0]
    while frontier.size:
        row, node = np.divmod(frontier, width)
        owner, links = out_core.expand(node)
        child = row[owner] * width + link_dst[links]
        # A link leads to a child only if that child's tree entry is this link.
        frontier = np.unique(child[flat_in[child] == links])
        found.append(frontier)
    return np.unique(np.concatenate(found))


def first_best(
    candidates: np.ndarray, owner: np.ndarray, links: np.ndarray, groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per group (owner 0..groups-1, links in id order inside a group): the
    smallest candidate and the lowest link id that reaches it.  Groups with no
    link, or only infinite candidates, get (inf, -1)."""
    best = np.full(groups, np.inf)
    chosen = np.full(groups, -1, np.int64)
    if owner.size == 0:
        return best, chosen
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    present = owner[starts]
    low = np.minimum.reduceat(candidates, starts)
    counts = np.diff(np.r_[starts, owner.size])
    ties = candidates == np.repeat(low, counts)
    first = np.minimum.reduceat(np.where(ties, np.arange(owner.size), owner.size), starts)
    finite = np.isfinite(low)
    best[present] = low
    chosen[present[finite]] = links[first[finite]]
    return best, chosen
