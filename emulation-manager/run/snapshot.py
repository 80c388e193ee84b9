"""The status snapshot: what `/status`, `/stream` and the dashboard show of a
run, the same in every mode.  The README's "Status API" section documents
these fields; a field added here is added there.

  run_id     the run's id (container mode: the experiment id)
  source     the experiment file
  mode       "local" or "container"
  t_us       experiment time (0 before t=0)
  state      "waiting" (before t=0), "running", "stopping", and in the last
             snapshot "ended" with `end` (end_of_run)
  instances  one row per instance of the experiment: name, ip, netns, status,
             network, pid, exit_code, egress (its token bucket now, or null:
             measure/bucket.py), and in container mode `container` and
             `shaped` (instance_rows)
  throughput per (src, dst) flow: bytes, rate now, median rate, segments
  sharing    the bandwidth-sharing loop's status ({"enabled": false} when off)
  events     applied (the event log so far), pending (steps still to
             fire), upcoming (the next of them: at_us and label)
  links, flows  the topology's links with their load, and each flow with its
             configured rate (status/topoview.py), for the dashboard
  probe      with --probe-every (local mode), per probed pair: src, dst,
             rtt_ms (its last echo), requests (up to the last one answered),
             replies, configured_rtt_ms (now; null: no path both ways)
  workload   per wl-client (local mode): client, requests by status (ok,
             err, timeout) and its OK requests' latency histogram so far
             (latency_buckets_s, latency_cumulative, latency_count,
             latency_sum_s: measure/livework.py); updated once a second
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from collapsar.errors import CollapsarError
from collapsar.manager.measure.throughput import Meter
from collapsar.manager.play.live import LivePlayer
from collapsar.manager.run.runtime import InstanceRuntime, Place
from collapsar.model import Experiment
from collapsar.runfiles import REPORT_FILE


class RunView(Protocol):
    """What a snapshot reads of a run (run/skeleton.py's ManagerRun)."""

    run_id: str
    experiment: Experiment
    timeline: Any
    runtime: InstanceRuntime
    instances: list[str]
    status: dict[str, str]
    network: dict[str, str]
    exit_codes: dict[str, int]
    stop_reason: str | None
    t0_ns: int | None
    player: LivePlayer
    meter: Meter | None
    sharing: Any
    live_view: Any

    @property
    def mode(self) -> str: ...
    def places(self) -> Mapping[str, Place]: ...
    def instance_extras(self) -> Mapping[str, dict]: ...
    def bucket_rows(self) -> Mapping[str, dict]: ...
    def live_figures(self) -> dict: ...


def run_state(run: RunView) -> str:
    if run.stop_reason is not None:
        return "stopping"
    return "running" if run.t0_ns is not None else "waiting"


NOWHERE = Place("", None, None)
NO_EXTRAS: dict = {}


def instance_rows(run: RunView) -> list[dict]:
    """One row per instance; what is per run (places, pids, the mode's
    fields) is asked for once per snapshot, not once per instance."""
    places, pids, extras, buckets = run.places(), run.runtime.pids(), run.instance_extras(), run.bucket_rows()
    status, network, exit_codes = run.status, run.network, run.exit_codes
    rows = []
    for name in run.instances:
        place = places.get(name, NOWHERE)
        rows.append(
            {
                "name": name,
                "ip": place.ip,
                "netns": place.netns,
                "status": status[name],
                "network": network[name],
                "pid": pids.get(name),
                "exit_code": exit_codes.get(name),
                "egress": buckets.get(name),
                **extras.get(name, NO_EXTRAS),
            }
        )
    return rows


def status_snapshot(run: RunView, now_us: int) -> dict:
    flows = run.meter.flows() if run.meter is not None else []
    player = run.player
    return {
        "run_id": run.run_id,
        "source": run.experiment.source,
        "mode": run.mode,
        "t_us": now_us,
        "state": run_state(run),
        "instances": instance_rows(run),
        "throughput": flows,
        "sharing": run.sharing.status() if run.sharing is not None else {"enabled": False},
        "events": {
            "applied": [dict(fired.as_dict()) for fired in player.log],
            "pending": player.pending,
            "upcoming": player.upcoming(),
        },
        **run.live_view(run.timeline.state_at(now_us), flows),
        **run.live_figures(),
    }


# Why a run stopped, as its last snapshot tells a reader of the page; the
# run's own line (`stopping: SIGINT`) keeps the words logs and tests know.
END_REASONS = {
    "duration reached": "--duration reached",
    "stop requested through the control API": "stopped from the control API",
    "SIGINT": "interrupted (Ctrl-C, SIGINT)",
    "SIGTERM": "interrupted (SIGTERM)",
    "SIGHUP": "interrupted (SIGHUP: its terminal closed)",
}


def exit_code_of(failure: BaseException | None) -> int:
    """The status `collapsar run` ends with (collapsar/cli.py)."""
    if failure is None:
        return 0
    if isinstance(failure, CollapsarError):
        return failure.exit_code
    return 130 if isinstance(failure, KeyboardInterrupt) else 1


def end_of_run(
    stop_reason: str | None, failure: BaseException | None, t_us: int, at_unix: float, run_dir: Path | None
) -> dict:
    """The `end` of a run's last snapshot: when (wall clock and run clock),
    why, the exit status, and where its results and report are (local mode)."""
    causes = [END_REASONS.get(stop_reason, stop_reason)] if stop_reason is not None else []
    if failure is not None:
        text = str(failure).strip()
        first = text.splitlines()[0].rstrip(":") if text else ""
        if not isinstance(failure, CollapsarError):  # a bug: its type says the most
            first = f"{type(failure).__name__}: {first}" if first else type(failure).__name__
        causes.append(f"failed: {first}")
    end: dict = {
        "at_unix": round(at_unix, 3),
        "t_us": t_us,
        "reason": "; ".join(causes) or "ended",
        "exit_code": exit_code_of(failure),
        "run_dir": None if run_dir is None else str(run_dir),
        "report": None,
    }
    if run_dir is not None:
        end["report"] = {"command": f"collapsar report {shlex.quote(str(run_dir))}", "path": str(run_dir / REPORT_FILE)}
    return end
