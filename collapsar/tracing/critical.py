"""Each request's critical path, cut into parts that add up to its duration.

A request is a client's root "request" span.  Its critical path runs
  request -> the serve on X -> X's ops in order (compute, load, store, forward)
  forward -> the forward.send whose reply completed the quorum -> the serve on Y -> ...
and every span on it contributes its *self time*, its duration minus the
durations of its children on the path:

  request, forward.send  network from the sender's instance to the served one: both
                         directions and the kernels' queues.  Sender's span minus the
                         receiver's serve, two durations each on its own clock, so no
                         clock sync is needed (Swarm nodes' clocks differ), minus the
                         reply's wait at the sender (wl.reply.wait_us: from the kernel's
                         receive of the reply to the span's end, the sender's wake-up
                         to read it), which is wait at the sender (cause "reply")
  serve                  wait at X: queueing before the first op (wl.queue_us, cause
                         "queue": it starts at the kernel's receive of the request, so
                         X's wake-up to read it is in it) and the node's own time
                         between and after ops ("local")
  forward                wait at X: before the critical send left (the other sends,
                         earlier failed attempts) and after its reply ("forward")
  compute                compute at X;  load, store: storage at X

The self times telescope: their sum is the request's duration, exactly.
So a hop's network time runs from the sender's send to the kernel of the
receiver, and from the receiver's reply to the kernel of the sender: no
process's wake-up is in it (spans written before the tools took kernel
receive times, without wl.reply.wait_us, still count both wake-ups there).

Choices: a forward's critical send is, among its sends with status ok in
order of their end, the nack-th: the reply that completed the quorum.
Abandoned sends (the forward settled before their reply) and failed
attempts never are; a forward that missed its quorum is settled by its
last-ending send that was not abandoned.  A request or send with several
serves (a duplicated datagram) takes the earliest.  An on-path request or
send without a serve (its receiver's spans are missing), or a forward
without sends, makes the request incomplete: reported, and left out of
the breakdown.

All of it is vectorised over the span columns: parents are joined by sort
and searchsorted, choices are made by lexsort within groups, and the path
is followed one level per pass (forwards nest at most 8 deep).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapsar.tracing.load import ABANDONED, COMPUTE, FORWARD, LOAD, OK, REQUEST, SEND, SERVE, STORE, SpanTable

KINDS = ("network", "compute", "storage", "wait")
NETWORK, COMPUTE_PART, STORAGE, WAIT = range(len(KINDS))
CAUSES = ("", "queue", "local", "forward", "reply")
NO_CAUSE, QUEUE, LOCAL, FORWARD_WAIT, REPLY_WAIT = range(len(CAUSES))
MAX_DEPTH = 64  # passes; a path is at most 2 + 3 x 8 nested forwards deep


@dataclass
class Requests:
    """One row per client request (root "request" span)."""

    client: np.ndarray  # int32 instance code
    status: np.ndarray  # int8 (load.STATUSES)
    start: np.ndarray  # int64 ns (the client's clock)
    duration: np.ndarray  # int64 ns
    complete: np.ndarray  # bool: every span of its critical path was found

    def __len__(self) -> int:
        return int(self.client.size)


@dataclass
class Parts:
    """One row per part of a request's critical path."""

    request: np.ndarray  # int32 row in Requests
    kind: np.ndarray  # int8 (KINDS)
    cause: np.ndarray  # int8 (CAUSES), for wait parts
    where: np.ndarray  # int32 instance; for network the sender
    to: np.ndarray  # int32 network: the served instance, else -1
    ns: np.ndarray  # int64 self time
    pos: np.ndarray  # int64 ns from the request's start (for ordering; clock-free estimate)
    configured: np.ndarray  # int32 compute: wl.compute.us as asked, else -1


@dataclass
class CriticalPaths:
    requests: Requests
    parts: Parts
    duplicate_ids: int  # spans whose (trace, span id) another span has too


def _first_per_group(rows: np.ndarray, group: np.ndarray, order_by: np.ndarray, last: bool = False) -> np.ndarray:
    """Of `rows`, the one with the least (greatest) `order_by` per `group` value."""
    if rows.size == 0:
        return rows
    ordered = rows[np.lexsort((order_by[rows], group[rows]))]
    g = group[ordered]
    edge = np.ones(ordered.size, bool)
    if last:
        edge[:-1] = g[1:] != g[:-1]
    else:
        edge[1:] = g[1:] != g[:-1]
    return ordered[edge]


def _parents(t: SpanTable) -> tuple[np.ndarray, int]:
    """Row of each span's parent (-1: none found), and the duplicate-id count."""
    n = len(t)
    order = np.argsort(t.key, kind="stable").astype(np.int32)
    keys = t.key[order]
    at = np.searchsorted(keys, t.parent)
    np.minimum(at, max(n - 1, 0), out=at)
    found = t.rooted & (keys[at] == t.parent) if n else np.zeros(0, bool)
    duplicates = int(np.count_nonzero(keys[1:] == keys[:-1]))
    del keys
    return np.where(found, order[at], np.int32(-1)), duplicates


def _critical_sends(t: SpanTable, parent: np.ndarray, parent_name: np.ndarray) -> np.ndarray:
    """crit[f] = row of forward f's critical send, -1 when it has none."""
    n = len(t)
    crit = np.full(n, -1, np.int32)
    sends = np.flatnonzero((t.name == SEND) & (parent_name == FORWARD))
    ok = sends[t.status[sends] == OK]
    if ok.size:
        ordered = ok[np.lexsort((t.end[ok], parent[ok]))]
        group = parent[ordered]
        first = np.ones(ordered.size, bool)
        first[1:] = group[1:] != group[:-1]
        starts = np.flatnonzero(first)
        size = np.diff(np.append(starts, ordered.size))
        rank = np.arange(ordered.size) - np.repeat(starts, size)
        nack = t.number[group]
        need = np.where(nack > 0, nack, np.repeat(size, size))  # no nack given: all of them
        hit = ordered[rank == need - 1]
        crit[parent[hit]] = hit
    # Missed quorum: whatever settled it, the last send that was not abandoned.
    rest = sends[(crit[parent[sends]] < 0) & (t.status[sends] != ABANDONED)]
    last = _first_per_group(rest, parent, t.end, last=True)
    crit[parent[last]] = last
    return crit


def critical_paths(t: SpanTable) -> CriticalPaths:
    n = len(t)
    parent, duplicates = _parents(t)
    has_parent = parent >= 0
    safe_parent = np.maximum(parent, 0)
    parent_name = t.name[safe_parent]
    parent_name[~has_parent] = -1
    duration = t.end - t.start

    serve_rows = np.flatnonzero((t.name == SERVE) & ((parent_name == REQUEST) | (parent_name == SEND)))
    chosen = _first_per_group(serve_rows, parent, t.start)
    serve_of = np.full(n, -1, np.int32)
    serve_of[parent[chosen]] = chosen
    crit = _critical_sends(t, parent, parent_name)

    rows = np.arange(n, dtype=np.int32)
    is_op = np.isin(t.name, (COMPUTE, LOAD, STORE, FORWARD)) & (parent_name == SERVE)
    eligible = np.flatnonzero(
        ((t.name == SERVE) & (serve_of[safe_parent] == rows) & has_parent)
        | ((t.name == SEND) & (crit[safe_parent] == rows) & has_parent)
        | is_op
    ).astype(np.int32)
    del rows, safe_parent, is_op, parent_name
    roots = np.flatnonzero((t.name == REQUEST) & ~has_parent)
    on = np.zeros(n, bool)
    on[roots] = True
    root = np.full(n, -1, np.int32)
    root[roots] = np.arange(roots.size)
    pos = np.zeros(n, np.int64)
    for _ in range(MAX_DEPTH):
        new = eligible[on[parent[eligible]] & ~on[eligible]]
        if new.size == 0:
            break
        up = parent[new]
        on[new] = True
        root[new] = root[up]
        # Across processes (a serve) only durations compare: half the hop's
        # round trip out; within one process, start times do.
        remote = t.name[new] == SERVE
        pos[new] = pos[up] + np.where(remote, (duration[up] - duration[new]) // 2, t.start[new] - t.start[up])
        eligible = eligible[~on[eligible]]

    children = np.flatnonzero(on & has_parent)
    below = np.bincount(parent[children], weights=duration[children], minlength=n)
    del children
    self_ns = duration - np.rint(below).astype(np.int64)
    del below

    path = np.flatnonzero(on)
    name = t.name[path]
    hop = np.isin(name, (REQUEST, SEND))
    broken = (hop & (serve_of[path] < 0)) | ((name == FORWARD) & (crit[path] < 0))
    complete = np.ones(roots.size, bool)
    complete[root[path[broken]]] = False
    requests = Requests(t.inst[roots], t.status[roots], t.start[roots], duration[roots], complete)
    return CriticalPaths(requests, _parts(t, path, root, pos, self_ns, serve_of, duration), duplicates)


def _parts(
    t: SpanTable,
    path: np.ndarray,
    root: np.ndarray,
    pos: np.ndarray,
    self_ns: np.ndarray,
    serve_of: np.ndarray,
    duration: np.ndarray,
) -> Parts:
    name = t.name[path]
    hop = np.isin(name, (REQUEST, SEND))
    kind = np.select(
        [hop, name == COMPUTE, np.isin(name, (LOAD, STORE))], [NETWORK, COMPUTE_PART, STORAGE], WAIT
    ).astype(np.int8)
    cause = np.select([name == SERVE, name == FORWARD], [LOCAL, FORWARD_WAIT], NO_CAUSE).astype(np.int8)
    served = serve_of[path]
    to = np.where((kind == NETWORK) & (served >= 0), t.inst[np.maximum(served, 0)], -1).astype(np.int32)
    configured = np.where(name == COMPUTE, t.number[path], -1).astype(np.int32)
    ns = self_ns[path].copy()
    # Waits a span reports within its self time become parts of their own at
    # its instance: a serve's queueing (wl.queue_us) at its start, a hop's
    # reply waiting to be read (wl.reply.wait_us, where written) at its end.
    # Never more than the self time: what is left stays the span's own.
    reported = (name == SERVE) | (hop & (t.number[path] >= 0))
    extra = np.flatnonzero(reported)
    rows = path[extra]
    moved = np.clip(t.number[rows] * 1000, 0, np.maximum(ns[extra], 0))
    ns[extra] -= moved
    queue = name[extra] == SERVE
    return Parts(
        request=np.concatenate([root[path], root[rows]]),
        kind=np.concatenate([kind, np.full(extra.size, WAIT, np.int8)]),
        cause=np.concatenate([cause, np.where(queue, QUEUE, REPLY_WAIT).astype(np.int8)]),
        where=np.concatenate([t.inst[path], t.inst[rows]]),
        to=np.concatenate([to, np.full(extra.size, -1, np.int32)]),
        ns=np.concatenate([ns, moved]),
        pos=np.concatenate([pos[path], np.where(queue, pos[rows], pos[rows] + duration[rows] - moved)]),
        configured=np.concatenate([configured, np.full(extra.size, -1, np.int32)]),
    )
