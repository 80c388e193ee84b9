"""The figures of a report, as data: what `collapsar report --json` prints
and what the page draws (one object; the page never reads the run itself).

  run          run_id, experiment name, source file, t0 (unix s), duration_s
               (the last second any series or event reached)
  experiment   the file as run (experiment.yaml): text, sha256, bytes
  provenance   host (kernel) and versions when the run started
               (provenance.json), null for a run that did not record them
  generated    when and by which collapsar version the report was made
  topology     the graph as the dashboard's /topology (topology.json)
  instances    each instance's fate (instances.json)
  events       per applied timeline step: index, label, scheduled_s,
               applied_s, lateness_ms, error, adhoc (events.json)
  flows        series: per flow (src, dst) its seconds `t` and, aligned,
               measured / configured / share (bit/s; configured and share
               null where unlimited), loss (congestion loss charged), cut
               (0/1), and its bits in all; the MAX_FLOWS busiest flows,
               leaving out those with less than MIN_DRAWN_SHARE of the
               busiest one's bits.
               total: how many flows sent.  table: flows.json (per segment
               the configured rate, median share and measured rate)
  links        series: per link and direction its seconds and utilisation,
               load_bps, capacity_bps; the MAX_LINKS busiest by peak
               utilisation.  total: link directions that carried traffic
  rtt          series: per probed pair its seconds and, aligned, the median,
               min and max RTT (ms), the configured RTT, and loss (the share
               of that second's echoes that did not come back); MAX_PAIRS
               pairs.  total: pairs probed (0 without --probe-every)
  workload     clients: per wl-client instance its requests by status, its
               latency percentiles and CDF (CDF_POINTS points of the OK
               requests, ms), and per second (workload.csv) its p50 and p99;
               breakdown: `collapsar trace`'s per-stretch breakdown (its
               JSON and its table as text); null without wl-clients
  notes        what the report could not show, and why

Every list is sorted so that the same run directory gives the same report.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
import time
from collections.abc import Iterable

import numpy as np

from collapsar.errors import CollapsarError
from collapsar.runfiles import RunDirError, RunFiles
from collapsar.tracing.critical import critical_paths
from collapsar.tracing.expect import expectation
from collapsar.tracing.load import read_run
from collapsar.tracing.report import summarize, table_lines

MAX_FLOWS = 40
MIN_DRAWN_SHARE = 0.01  # of the busiest flow's bits: smaller flows are in the table only
MAX_LINKS = 12
MAX_PAIRS = 24
CDF_POINTS = 200
TRACE_DIR = "workload"
FORMAT = 1


def _number(text: str | None) -> float | None:
    """A CSV cell: empty is None (an unlimited rate), otherwise a number."""
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _grouped(rows: Iterable[dict[str, str]], key: tuple[str, ...], columns: tuple[str, ...]) -> dict[tuple, dict]:
    """Rows of a series grouped by `key`, each group columnar: t and `columns`."""
    groups: dict[tuple, dict] = {}
    for row in rows:
        ident = tuple(row.get(k) or "" for k in key)
        group = groups.get(ident)
        if group is None:
            group = groups[ident] = {"t": [], **{c: [] for c in columns}}
        group["t"].append(_number(row.get("t_s")))
        for column in columns:
            group[column].append(_number(row.get(column)))
    return groups


def flow_figures(files: RunFiles, limit: int = MAX_FLOWS) -> dict:
    columns = ("measured_bps", "configured_bps", "share_bps", "congestion_loss", "cut")
    groups = _grouped(files.csv_rows("series/flows.csv"), ("src", "dst"), columns)
    series = []
    for (src, dst), group in groups.items():
        bits = sum(v or 0 for v in group["measured_bps"])
        series.append(
            {
                "src": src,
                "dst": dst,
                "bits": bits,
                "t": group["t"],
                "measured": group["measured_bps"],
                "configured": group["configured_bps"],
                "share": group["share_bps"],
                "loss": group["congestion_loss"],
                "cut": group["cut"],
            }
        )
    series.sort(key=lambda f: (-f["bits"], f["src"], f["dst"]))
    # A probe's echoes and a protocol's acks are flows too; drawn beside the
    # experiment's own they would bury them.
    floor = series[0]["bits"] * MIN_DRAWN_SHARE if series else 0
    drawn = [f for f in series[:limit] if f["bits"] >= floor]
    table = files.json("flows.json", list) or []
    return {"total": len(series), "series": drawn, "table": table}


def link_figures(files: RunFiles, limit: int = MAX_LINKS) -> dict:
    groups = _grouped(
        files.csv_rows("series/links.csv"),
        ("link", "a", "b", "direction"),
        ("utilisation", "load_bps", "capacity_bps"),
    )
    series = [
        {
            "link": _number(link),
            "a": a,
            "b": b,
            "direction": direction,
            "peak": max((u for u in group["utilisation"] if u is not None), default=0),
            "t": group["t"],
            "utilisation": group["utilisation"],
            "load": group["load_bps"],
            "capacity": group["capacity_bps"],
        }
        for (link, a, b, direction), group in groups.items()
    ]
    series.sort(key=lambda s: (-s["peak"], s["link"] if s["link"] is not None else -1, s["direction"]))
    return {"total": len(series), "series": series[:limit]}


def rtt_figures(files: RunFiles, limit: int = MAX_PAIRS) -> dict:
    columns = ("sent", "received", "rtt_median_ms", "rtt_min_ms", "rtt_max_ms", "configured_rtt_ms")
    groups = _grouped(files.csv_rows("series/rtt.csv"), ("src", "dst"), columns)
    series = []
    for (src, dst), group in sorted(groups.items()):
        loss = [
            None if not sent else round(1 - (received or 0) / sent, 4)
            for sent, received in zip(group["sent"], group["received"])
        ]
        series.append(
            {
                "src": src,
                "dst": dst,
                "t": group["t"],
                "median": group["rtt_median_ms"],
                "min": group["rtt_min_ms"],
                "max": group["rtt_max_ms"],
                "configured": group["configured_rtt_ms"],
                "loss": loss,
            }
        )
    return {"total": len(series), "series": series[:limit]}


def event_figures(files: RunFiles) -> list[dict]:
    events = files.json("events.json", list) or []
    return [
        {
            "index": e.get("index"),
            "label": str(e.get("label", "")),
            "scheduled_s": e["scheduled_us"] / 1e6,
            "applied_s": e["applied_us"] / 1e6 if isinstance(e.get("applied_us"), int) else None,
            "lateness_ms": e["lateness_us"] / 1000 if isinstance(e.get("lateness_us"), int) else None,
            "error": e.get("error"),
            "adhoc": bool(e.get("adhoc")),
        }
        for e in events
        if isinstance(e, dict) and isinstance(e.get("scheduled_us"), int)
    ]


def nearest_rank(values, q: float) -> float:
    """The smallest of `values` with at least a fraction `q` of them at or
    below it (the percentiles of reports and aggregates alike)."""
    return float(np.quantile(values, q, method="inverted_cdf"))


def cdf(latencies_ms: np.ndarray, points: int = CDF_POINTS) -> dict:
    """The empirical CDF at `points` fractions: half of them evenly from 0
    to 0.99 (0.01 apart with the default), the other half in the tail
    above 0.99 up to 1; each the smallest measured latency with at least
    that fraction of the requests at or below it (nearest rank)."""
    if latencies_ms.size == 0:
        return {"fraction": [], "latency_ms": []}
    body = points // 2
    fractions = np.concatenate([np.linspace(0, 0.99, body), np.linspace(0.99, 1, points - body + 1)[1:]])
    values = np.quantile(latencies_ms, fractions, method="inverted_cdf")
    return {"fraction": [round(float(f), 6) for f in fractions], "latency_ms": [round(float(v), 3) for v in values]}


def _client_requests(files: RunFiles, client: str) -> dict:
    counts = {"OK": 0, "ERR": 0, "TIMEOUT": 0}
    latencies = []
    for row in files.csv_rows(f"{TRACE_DIR}/{client}.requests.csv"):
        status = row.get("status", "")
        counts[status] = counts.get(status, 0) + 1
        if status == "OK" and (latency := _number(row.get("latency_us"))) is not None:
            latencies.append(latency / 1000)
    ok = np.array(latencies, dtype=np.float64)
    quantiles = {
        name: None if ok.size == 0 else round(nearest_rank(ok, q), 3)
        for name, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99), ("max_ms", 1.0))
    }
    return {
        "client": client,
        "requests": sum(counts.values()),
        "ok": counts["OK"],
        "err": counts["ERR"],
        "timeout": counts["TIMEOUT"],
        **quantiles,
        "cdf": cdf(ok),
    }


def workload_figures(files: RunFiles, with_breakdown: bool = True) -> dict | None:
    suffix = ".requests.csv"
    clients = [name[: -len(suffix)] for name in files.names(TRACE_DIR) if name.endswith(suffix)]
    if not clients:
        return None
    per_second = _grouped(files.csv_rows("series/workload.csv"), ("client",), ("p50_ms", "p99_ms", "sent"))
    rows = []
    for client in clients:
        row = _client_requests(files, client)
        seconds = per_second.get((client,), {"t": [], "p50_ms": [], "p99_ms": [], "sent": []})
        row["per_second"] = {k: seconds[k] for k in ("t", "p50_ms", "p99_ms", "sent")}
        rows.append(row)
    if not with_breakdown:
        return {"clients": rows, "breakdown": None, "breakdown_text": []}
    return {"clients": rows, **breakdown(files)}


def breakdown(files: RunFiles) -> dict:
    """`collapsar trace`'s breakdown of the run's spans, or a note why none."""
    try:
        inputs = read_run(files.path)
        paths = critical_paths(inputs.spans)
        expected, notes = expectation(inputs)
    except CollapsarError as error:
        files.notes.append(f"no latency breakdown: {error}")
        return {"breakdown": None, "breakdown_text": []}
    summary = {**summarize(paths, inputs.spans, expected, inputs.t0_ns), "notes": inputs.notes + notes}
    return {"breakdown": summary["breakdown"], "breakdown_text": table_lines(summary) + summary["notes"]}


def _duration(figures: dict) -> float:
    ends = [e["applied_s"] or e["scheduled_s"] for e in figures["events"]]
    for part in ("flows", "links", "rtt"):
        ends += [s["t"][-1] for s in figures[part]["series"] if s["t"] and s["t"][-1] is not None]
    if figures["workload"]:
        ends += [c["per_second"]["t"][-1] for c in figures["workload"]["clients"] if c["per_second"]["t"]]
    return max(ends, default=0.0)


def _version() -> str | None:
    try:
        return importlib.metadata.version("collapsar")
    except importlib.metadata.PackageNotFoundError:
        return None


def build(files: RunFiles, flows: int = MAX_FLOWS, with_breakdown: bool = True) -> dict:
    """Every figure of the run in `files` (see the module's docstring);
    without the latency breakdown (its spans read and walked) if a caller
    has no use for it."""
    plan = files.json("plan.json")
    experiment = files.text("experiment.yaml")
    if plan is None and experiment is None:
        raise RunDirError(f"{files.path}: no plan.json or experiment.yaml; expected the run directory of a local run")
    plan = plan or {}
    t0 = files.text("t0", 64)
    topology = files.json("topology.json")
    figures = {
        "format": FORMAT,
        "generated": {"at_unix": round(time.time(), 3), "collapsar": _version()},
        "run": {
            "run_id": plan.get("run_id"),
            "experiment": (topology or {}).get("experiment"),
            "source": plan.get("source"),
            "t0_unix": _number(t0.strip()) if t0 else None,
            "duration_s": 0.0,
        },
        "experiment": None
        if experiment is None
        else {
            "text": experiment,
            "sha256": hashlib.sha256(experiment.encode()).hexdigest(),
            "bytes": len(experiment.encode()),
        },
        "provenance": files.json("provenance.json"),
        "topology": topology,
        "instances": files.json("instances.json", list) or [],
        "events": event_figures(files),
        "flows": flow_figures(files, flows),
        "links": link_figures(files),
        "rtt": rtt_figures(files),
        "workload": workload_figures(files, with_breakdown),
    }
    figures["run"]["duration_s"] = _duration(figures)
    figures["notes"] = _notes(files, figures)
    return figures


def _notes(files: RunFiles, figures: dict) -> list[str]:
    notes = list(files.notes)
    if figures["topology"] is None:
        notes.append("no topology.json (a run before reports existed): the graph is not drawn")
    if figures["provenance"] is None:
        notes.append("no provenance.json: the kernel and tool versions of the run are unknown")
    if not files.exists("series/flows.csv"):
        notes.append("no series/ (a container-mode run, or one before series existed): nothing over time")
    elif figures["flows"]["total"] > len(figures["flows"]["series"]):
        notes.append(
            f"{figures['flows']['total']} flows sent; the {len(figures['flows']['series'])} busiest are drawn "
            f"(at most {MAX_FLOWS}, each with at least {MIN_DRAWN_SHARE:.0%} of the busiest one's bits; "
            f"all are in series/flows.csv and the end table)"
        )
    if figures["links"]["total"] > len(figures["links"]["series"]):
        notes.append(
            f"{figures['links']['total']} link directions carried traffic; the {len(figures['links']['series'])} "
            f"busiest by peak utilisation are drawn"
        )
    if figures["rtt"]["total"] == 0:
        notes.append("no RTT over time: the run had no --probe-every")
    elif figures["rtt"]["total"] > len(figures["rtt"]["series"]):
        notes.append(f"{figures['rtt']['total']} pairs probed; {len(figures['rtt']['series'])} are drawn")
    return notes
