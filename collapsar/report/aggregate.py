"""Figures of repeated runs: per figure its mean, spread and 95% confidence
interval over the runs (`collapsar run --repeat N`, `--sweep`).

`stats(values)` is the one summary everything here uses:

  n       runs that have the figure (a flow absent from a run is not a zero)
  mean    arithmetic mean
  sd      sample standard deviation (n - 1), null for one run
  ci95    [lo, hi]: mean -/+ t(0.975, n - 1) * sd / sqrt(n), Student's t
          interval for the mean of independent runs; null for one run
  min, median, max   over the runs (median: the mean of the two middle
          values for an even n)

`aggregate(runs)` takes the figures of each run (collapsar.report.figures)
and gives, with that summary:
  flows     per flow drawn in any run (busiest by mean bits first): over time
            per second of the run (t rounded to whole seconds, the series'
            rows fall a few ms after each) mean, ci95 and min/max of the
            measured rate, the configured rate; per stretch of the end table
            (matched across runs by its start, to 0.1 s) the median measured
            rate and median share
  rtt       per probed pair over time: the median RTT's mean, ci95, min/max;
            the loss's mean
  events    per timeline step: its lateness
  lateness  each run's p50 and p99 event lateness (nearest rank)
  workload  per client: p50, p90, p99, max latency, requests, ok, err,
            timeout; and each run's CDF, for the spread of the distribution
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from scipy import stats as scipy_stats

from collapsar.report.figures import nearest_rank

MAX_FLOWS = 40
DIGITS = 6  # significant digits kept of every figure


def _round(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, DIGITS - 1 - int(math.floor(math.log10(abs(value)))))


def t_quantile(n: int) -> float:
    """t(0.975, n - 1): the factor of the 95% interval for n runs."""
    return float(scipy_stats.t.ppf(0.975, n - 1))


def stats(values: Iterable[float | None]) -> dict | None:
    """The summary of one figure over the runs (see the module docstring)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    n, mean = len(xs), math.fsum(xs) / len(xs)
    sd = statistics.stdev(xs) if n > 1 else None
    half = t_quantile(n) * sd / math.sqrt(n) if sd is not None else None
    return {
        "n": n,
        "mean": _round(mean),
        "sd": None if sd is None else _round(sd),
        "ci95": None if half is None else [_round(mean - half), _round(mean + half)],
        "min": _round(min(xs)),
        "median": _round(statistics.median(xs)),
        "max": _round(max(xs)),
    }


def _over_time(per_run: list[tuple[list, list]]) -> dict:
    """Columns over whole seconds from (t, values) of each run."""
    at: dict[int, list[float | None]] = {}
    for ts, values in per_run:
        for t, v in zip(ts, values):
            if t is not None:
                at.setdefault(round(t), []).append(v)
    seconds = sorted(at)
    summaries = [stats(at[t]) for t in seconds]
    column = lambda key: [s[key] if s else None for s in summaries]  # noqa: E731
    ci = [s["ci95"] if s and s["ci95"] else None for s in summaries]
    means = column("mean")
    return {
        "t": seconds,
        "n": [s["n"] if s else 0 for s in summaries],
        "mean": means,
        "lo": [c[0] if c else m for c, m in zip(ci, means)],
        "hi": [c[1] if c else m for c, m in zip(ci, means)],
        "median": column("median"),
        "min": column("min"),
        "max": column("max"),
    }


def _segments(tables: list[list[dict]], src: str, dst: str) -> list[dict]:
    by_start: dict[float, list[dict]] = {}
    for table in tables:
        flow = next((f for f in table if f.get("src") == src and f.get("dst") == dst), None)
        for segment in (flow or {}).get("segments", []):
            by_start.setdefault(round(segment["start_s"], 1), []).append(segment)
    return [
        {
            "start_s": start,
            "end_s": segments[0].get("end_s"),
            "configured_bps": segments[0].get("configured_bps"),
            "limited_by": segments[0].get("limited_by"),
            "measured_bps": stats(s.get("median_rate_bps") for s in segments),
            "share_bps": stats(s.get("median_share_bps") for s in segments),
        }
        for start, segments in sorted(by_start.items())
    ]


def flow_aggregate(runs: list[dict], limit: int = MAX_FLOWS) -> list[dict]:
    series: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        for flow in run["flows"]["series"]:
            series.setdefault((flow["src"], flow["dst"]), []).append(flow)
    tables = [run["flows"]["table"] for run in runs]
    rows = []
    for (src, dst), flows in series.items():
        bits = stats(f["bits"] for f in flows)
        rows.append(
            {
                "src": src,
                "dst": dst,
                "bits": bits,
                "measured": _over_time([(f["t"], f["measured"]) for f in flows]),
                "configured": _over_time([(f["t"], f["configured"]) for f in flows])["median"],
                "segments": _segments(tables, src, dst),
            }
        )
    rows.sort(key=lambda r: (-(r["bits"] or {}).get("mean", 0), r["src"], r["dst"]))
    return rows[:limit]


def rtt_aggregate(runs: list[dict]) -> list[dict]:
    series: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        for pair in run["rtt"]["series"]:
            series.setdefault((pair["src"], pair["dst"]), []).append(pair)
    return [
        {
            "src": src,
            "dst": dst,
            "median": _over_time([(p["t"], p["median"]) for p in pairs]),
            "configured": _over_time([(p["t"], p["configured"]) for p in pairs])["median"],
            "loss": _over_time([(p["t"], p["loss"]) for p in pairs])["mean"],
        }
        for (src, dst), pairs in sorted(series.items())
    ]


def event_aggregate(runs: list[dict]) -> tuple[list[dict], dict]:
    by_index: dict[int, list[dict]] = {}
    per_run = []
    for run in runs:
        late = [e["lateness_ms"] for e in run["events"] if e["lateness_ms"] is not None]
        per_run.append((nearest_rank(late, 0.5), nearest_rank(late, 0.99)) if late else (None, None))
        for event in run["events"]:
            by_index.setdefault(event["index"], []).append(event)
    events = [
        {
            "index": index,
            "label": events[0]["label"],
            "scheduled_s": events[0]["scheduled_s"],
            "lateness_ms": stats(e["lateness_ms"] for e in events),
            "errors": sum(1 for e in events if e["error"]),
        }
        for index, events in sorted(by_index.items(), key=lambda item: (item[0] is None, item[0] or 0))
    ]
    lateness = {"p50_ms": stats(p50 for p50, _ in per_run), "p99_ms": stats(p99 for _, p99 in per_run)}
    return events, lateness


WORKLOAD_FIGURES = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "requests", "ok", "err", "timeout")


def workload_aggregate(runs: list[dict]) -> list[dict]:
    clients: dict[str, list[dict]] = {}
    for run in runs:
        for client in (run["workload"] or {}).get("clients", []):
            clients.setdefault(client["client"], []).append(client)
    return [
        {
            "client": name,
            **{figure: stats(c[figure] for c in rows) for figure in WORKLOAD_FIGURES},
            "cdfs": [c["cdf"] for c in rows],
        }
        for name, rows in sorted(clients.items())
    ]


def aggregate(runs: list[dict]) -> dict:
    """Every figure of these runs of one experiment (the module docstring)."""
    events, lateness = event_aggregate(runs)
    return {
        "runs": len(runs),
        "flows": flow_aggregate(runs),
        "rtt": rtt_aggregate(runs),
        "events": events,
        "lateness": lateness,
        "workload": workload_aggregate(runs),
    }
