"""What `collapsar trace` says: per-client latency, and where it goes.

`summarize` turns the critical paths of a run into one JSON-able object:
  clients    per client instance: requests by status and the latency
             percentiles of its ok requests, for the whole run and per segment
  breakdown  per client, segment and part of the path (network from -> to,
             compute / storage / wait at an instance): the median over ok,
             complete requests of that part's time in a request, its mean
             (zero where a request lacks it: the means of a segment add up
             to its mean latency), on how many requests' paths it was, and
             `expected_ms` where the topology implies one (network: the
             configured RTT; compute: the time asked for); a wait also gives
             the medians of its causes: queueing at a node (`queue_median_ms`),
             a forward beyond its critical reply (`forward_median_ms`), and
             replies waiting for the sender to read them (`reply_median_ms`)
A segment is a stretch of the run in which no path between the ends of the
client's hops changed (delay, jitter, loss, rate, route: a timeline step's
changed pairs): a `set` event on a link they cross shows as a segment
before it and one after.  A request belongs to the segment of its start.

Percentiles are nearest-rank (the smallest value with at least that share
of values at or below it: always a value that occurred); a median is the
50th.  Error and timeout requests are counted by status, and left out of the
percentiles and the breakdown, as are incomplete requests (spans missing).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from collapsar.tracing.critical import FORWARD_WAIT, KINDS, NETWORK, QUEUE, REPLY_WAIT, WAIT, CriticalPaths
from collapsar.tracing.expect import Expectation
from collapsar.tracing.load import OK, STATUSES, SpanTable

QUANTILES = (("p50_ms", 500), ("p90_ms", 900), ("p99_ms", 990), ("p99_9_ms", 999))  # thousandths


def nearest_rank(ordered: np.ndarray, thousandths: int) -> int:
    """The nearest-rank percentile of sorted values."""
    rank = max(1, -(-thousandths * ordered.size // 1000))
    return int(ordered[rank - 1])


def _ms(ns: float | int) -> float:
    return round(float(ns) / 1e6, 3)


def _latency(durations: np.ndarray, statuses: np.ndarray) -> dict:
    by_status = {name: int(np.count_nonzero(statuses == code)) for code, name in enumerate(STATUSES)}
    by_status = {name: count for name, count in by_status.items() if count or name in ("ok", "error", "timeout")}
    ok = np.sort(durations[statuses == OK])
    out: dict = {"count": int(durations.size), "by_status": by_status}
    for key, thousandths in QUANTILES:
        out[key] = _ms(nearest_rank(ok, thousandths)) if ok.size else None
    out["mean_ms"] = _ms(ok.mean()) if ok.size else None
    out["max_ms"] = _ms(ok[-1]) if ok.size else None
    return out


def _segments(exp: Expectation | None, names: list[str], hops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(first, last) interval of each stretch in which no path of `hops` changed."""
    if exp is None:
        return [(0, 0)]
    pairs = [(names[a], names[b]) for a, b in hops]
    runs = [(0, 0)]
    for interval in range(1, len(exp)):
        if exp.changes(interval, pairs):
            runs.append((interval, interval))
        else:
            runs[-1] = (runs[-1][0], interval)
    return runs


def _groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort order by `keys` (first most significant) and the start of each group in it."""
    order = np.lexsort(keys[::-1])
    edge = np.zeros(order.size, bool)
    edge[:1] = True
    for key in keys:
        k = key[order]
        edge[1:] |= k[1:] != k[:-1]
    return order, np.flatnonzero(edge)


def _medians(group_of: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Nearest-rank median of `values` per group 0..groups-1 (0 where empty)."""
    order = np.lexsort((values, group_of))
    counts = np.bincount(group_of, minlength=groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pick = starts + np.maximum((counts + 1) // 2, 1) - 1
    return (
        np.where(counts > 0, values[order][np.minimum(pick, max(values.size - 1, 0))], 0)
        if values.size
        else np.zeros(groups, values.dtype)
    )


def summarize(paths: CriticalPaths, spans: SpanTable, exp: Expectation | None, t0_ns: int | None) -> dict:
    req, parts = paths.requests, paths.parts
    names = spans.instances
    t_us = (req.start - t0_ns) // 1000 if t0_ns is not None else np.zeros(len(req), np.int64)
    interval = exp.interval_at(t_us) if exp is not None else np.zeros(len(req), np.int64)
    usable = (req.status == OK) & req.complete
    # The hops each client's usable requests took, found once for all clients.
    hop_rows = np.flatnonzero((parts.kind == NETWORK) & (parts.to >= 0) & usable[parts.request])
    hops_of: dict[int, list[tuple[int, int]]] = {}
    if hop_rows.size:
        triples = np.unique(
            np.stack([req.client[parts.request[hop_rows]], parts.where[hop_rows], parts.to[hop_rows]], axis=1), axis=0
        )
        for client, a, b in triples.tolist():
            hops_of.setdefault(client, []).append((a, b))
    by_client = np.argsort(req.client, kind="stable")
    edges = np.searchsorted(req.client[by_client], np.arange(len(names) + 1))
    segment = np.full(len(req), -1, np.int64)
    segments: list[dict] = []  # client, first interval, bounds, usable requests
    clients = []
    for client in sorted(set(req.client.tolist()), key=lambda code: names[code]):
        rows = by_client[edges[client] : edges[client + 1]]
        entry = {
            "instance": names[client],
            "service": spans.services[client],
            **_latency(req.duration[rows], req.status[rows]),
            "incomplete": int(np.count_nonzero(~req.complete[rows])),
            "segments": [],
        }
        for first, last in _segments(exp, names, hops_of.get(client, [])):
            in_it = rows[(interval[rows] >= first) & (interval[rows] <= last)]
            if in_it.size == 0:
                continue
            segment[in_it] = len(segments)
            bounds = _bounds(exp, first, last)
            segments.append(
                {"client": client, "first": first, **bounds, "usable": int(np.count_nonzero(usable[in_it]))}
            )
            entry["segments"].append({**bounds, **_latency(req.duration[in_it], req.status[in_it])})
        clients.append(entry)
    breakdown = _breakdown(paths, segment, usable, segments, names, exp)
    return {
        "spans": len(spans),
        "requests": len(req),
        "incomplete": int(np.count_nonzero(~req.complete)),
        "percentiles": "nearest rank, over ok requests",
        "clients": clients,
        "breakdown": breakdown,
    }


def _bounds(exp: Expectation | None, first: int, last: int) -> dict:
    if exp is None:
        return {"from_s": 0.0, "until_s": None}
    until = exp.starts_us[last + 1] / 1e6 if last + 1 < len(exp) else None
    return {"from_s": exp.starts_us[first] / 1e6, "until_s": until}


def _breakdown(
    paths: CriticalPaths,
    segment: np.ndarray,
    usable: np.ndarray,
    segments: list[dict],
    names: list[str],
    exp: Expectation | None,
) -> list[dict]:
    parts = paths.parts
    keep = np.flatnonzero(usable[parts.request])
    if keep.size == 0:
        return []
    # One value per request and part: a hop taken twice in a request counts once, summed.
    order, starts = _groups(*(column[keep] for column in (parts.request, parts.kind, parts.where, parts.to)))
    rows = keep[order]
    del keep, order
    ns, cause = parts.ns[rows], parts.cause[rows]
    total = np.add.reduceat(ns, starts)
    queue = np.add.reduceat(np.where(cause == QUEUE, ns, 0), starts)
    forward = np.add.reduceat(np.where(cause == FORWARD_WAIT, ns, 0), starts)
    reply = np.add.reduceat(np.where(cause == REPLY_WAIT, ns, 0), starts)
    del ns, cause
    asked = np.add.reduceat(np.maximum(parts.configured[rows], 0), starts)
    first_pos = np.minimum.reduceat(parts.pos[rows], starts)
    heads = rows[starts]
    del rows
    r, k, w, t = (column[heads] for column in (parts.request, parts.kind, parts.where, parts.to))
    seg = segment[r]
    # Then per segment and part.
    order2, starts2 = _groups(seg, k, w, t)
    group_of = np.empty(order2.size, np.int64)
    group_of[order2] = np.repeat(np.arange(starts2.size), np.diff(np.append(starts2, order2.size)))
    groups = starts2.size
    counts = np.bincount(group_of, minlength=groups)
    sums = np.bincount(group_of, weights=total, minlength=groups)
    mean_pos = np.bincount(group_of, weights=first_pos, minlength=groups) / np.maximum(counts, 1)
    median, median_queue, median_forward, median_reply, median_asked = (
        _medians(group_of, values, groups) for values in (total, queue, forward, reply, asked)
    )
    heads = order2[starts2]
    rows = []
    for g in sorted(range(groups), key=lambda g: (seg[heads[g]], mean_pos[g])):
        s = segments[seg[heads[g]]]
        kind_code, a, b = int(k[heads[g]]), names[w[heads[g]]], int(t[heads[g]])
        row = {"client": names[s["client"]], "from_s": s["from_s"], "until_s": s["until_s"], "kind": KINDS[kind_code]}
        row.update({"from": a, "to": names[b]} if kind_code == NETWORK else {"instance": a})
        row.update(
            {"median_ms": _ms(median[g]), "mean_ms": _ms(sums[g] / max(s["usable"], 1)), "count": int(counts[g])}
        )
        if kind_code == NETWORK and exp is not None:
            rtt = exp.rtt_us(s["first"], a, names[b])
            if rtt is not None:
                row["expected_ms"] = rtt / 1000
        elif KINDS[kind_code] == "compute" and median_asked[g] > 0:
            row["expected_ms"] = round(float(median_asked[g]) / 1000, 3)
        elif kind_code == WAIT:
            row.update(
                {
                    "queue_median_ms": _ms(median_queue[g]),
                    "forward_median_ms": _ms(median_forward[g]),
                    "reply_median_ms": _ms(median_reply[g]),
                }
            )
        rows.append(row)
    return rows


def table_lines(summary: dict) -> list[str]:
    """The summary as the default (human) output."""
    head = ("CLIENT", "REQUESTS", "OK", "ERROR", "TIMEOUT", "P50", "P90", "P99", "P99.9", "MAX")
    rows = [head]
    for c in summary["clients"]:
        s = c["by_status"]
        rows.append(
            (
                c["instance"],
                str(c["count"]),
                str(s["ok"]),
                str(s["error"]),
                str(s["timeout"]),
                *(_cell(c[key]) for key in ("p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "max_ms")),
            )
        )
    lines = _aligned(rows, left=1)
    for c in summary["clients"]:
        for seg in c["segments"]:
            lines += [""] + _segment_lines(c, seg, summary["breakdown"])
    lines += [
        "",
        f"{summary['spans']} spans, {summary['requests']} requests"
        + (
            f", {summary['incomplete']} incomplete (spans missing; not in the breakdown)"
            if summary["incomplete"]
            else ""
        )
        + "; percentiles nearest-rank over ok requests; network = sender's span - receiver's serve "
        "- the reply's wait at the sender (both directions, kernel to kernel, no clock sync)",
    ]
    return lines


def _segment_lines(client: dict, seg: dict, breakdown: list[dict]) -> list[str]:
    until = "the end" if seg["until_s"] is None else f"{seg['until_s']:g}s"
    when = "whole run" if seg["from_s"] == 0 and seg["until_s"] is None else f"{seg['from_s']:g}s to {until}"
    mine = [b for b in breakdown if b["client"] == client["instance"] and b["from_s"] == seg["from_s"]]
    lines = [
        f"{client['instance']}, {when}: {seg['count']} requests ({seg['by_status']['ok']} ok), "
        f"p50 {_cell(seg['p50_ms'])}, p99 {_cell(seg['p99_ms'])}"
    ]
    if not mine:
        return lines + ["  no complete ok request: no breakdown"]
    rows = [("  PART", "MEDIAN", "CONFIGURED", "MEAN", "ON PATH")]
    for b in mine:
        where = f"{b['from']} -> {b['to']}" if b["kind"] == "network" else b["instance"]
        causes = [
            f"{cause} {b[cause + '_median_ms']:.3f} ms"
            for cause in ("queue", "reply")
            if b["kind"] == "wait" and b[cause + "_median_ms"]
        ]
        if causes:
            where += f" ({', '.join(causes)})"
        rows.append(
            (
                f"  {b['kind']} {where}",
                _cell(b["median_ms"]),
                _cell(b.get("expected_ms"), ""),
                _cell(b["mean_ms"]),
                str(b["count"]),
            )
        )
    total = sum(b["mean_ms"] for b in mine)
    return lines + _aligned(rows, left=1) + [f"  (the means add up to the mean latency, {total:.3f} ms)"]


def _cell(ms: float | None, empty: str = "-") -> str:
    return empty if ms is None else f"{ms:.3f} ms"


def _aligned(rows: Sequence[tuple[str, ...]], left: int) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(widths[i]) if i < left else cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in rows
    ]
