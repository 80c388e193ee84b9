"""The status snapshot: what `/status`, `/stream` and the dashboard show of a
run, the same in every mode.  The README's "Status API" section documents
these fields; a field added here is added there.

  run_id     the run's id (container mode: the experiment id)
  source     the experiment file
  mode       "local" or "container"
  t_us       experiment time (0 before t=0)
  state      "waiting" (before t=0), "running", "stopping"
  instances  one row per instance of the experiment (INSTANCE_FIELDS, and in
             container mode `container` and `shaped`)
  throughput per (src, dst) flow: bytes, rate now, median rate, segments
  sharing    the bandwidth-sharing loop's status ({"enabled": false} when off)
  events     applied (the event log so far), pending (steps still to
             fire), upcoming (the next of them: at_us and label)
  links, flows  the topology's links with their load, and each flow with its
             configured rate (status/topoview.py), for the dashboard
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collapsar.manager.run.skeleton import ManagerRun

SNAPSHOT_FIELDS = (
    "run_id",
    "source",
    "mode",
    "t_us",
    "state",
    "instances",
    "throughput",
    "sharing",
    "events",
    "links",
    "flows",
)
INSTANCE_FIELDS = ("name", "ip", "netns", "status", "network", "pid", "exit_code")


def run_state(run: ManagerRun) -> str:
    if run.stop_reason is not None:
        return "stopping"
    return "running" if run.t0_ns is not None else "waiting"


def instance_row(run: ManagerRun, name: str) -> dict:
    place = run.place_of(name)
    return {
        "name": name,
        "ip": place.ip if place else None,
        "netns": place.netns if place else None,
        "status": run.status[name],
        "network": run.network[name],
        "pid": run.runtime.pid_of(name),
        "exit_code": run.exit_codes.get(name),
        **run.instance_extras(name),
    }


def status_snapshot(run: ManagerRun, now_us: int) -> dict:
    flows = run.meter.flows() if run.meter is not None else []
    player = run.player
    return {
        "run_id": run.run_id,
        "source": run.experiment.source,
        "mode": run.mode,
        "t_us": now_us,
        "state": run_state(run),
        "instances": [instance_row(run, name) for name in run.instances],
        "throughput": flows,
        "sharing": run.sharing.status() if run.sharing is not None else {"enabled": False},
        "events": {
            "applied": [dict(fired.as_dict()) for fired in player.log],
            "pending": player.pending,
            "upcoming": player.upcoming(),
        },
        **run.live_view(run.timeline.state_at(now_us), flows),
    }
