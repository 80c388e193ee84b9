"""What a local run writes and prints about itself: plan.json before the
network exists, the probe's table (probe.json) before t=0, and at the end the
flow table (flows.json), the event log (events.json) and the instances'
fates (instances.json).  Functions of the `LocalRun` they report on."""

from __future__ import annotations

import json

from . import probe
from .experiment import service_of
from .report import flow_table
from .scheduler import percentile


def write_plan(run) -> None:
    run.rundir.write_file("plan.json", json.dumps({
        "run_id": run.run_id, "source": run.experiment.source, "subnet": run.plan.subnet,
        "bridge": run.plan.bridge, "netem": run.netem,
        "instances": [{"name": n.instance, "ip": n.ip, "netns": n.netns, "veth": n.host_veth}
                      for n in run.plan.instances]}, indent=1))


def probe_pairs(run) -> None:
    """RTT, jitter and loss per pair at t=0, before any command runs (probe.py)."""
    first = run.timeline.steps[0].state
    by_service: dict[str, list[str]] = {}
    for instance in first.instances:
        by_service.setdefault(service_of(run.experiment, instance), []).append(instance)
    pairs = probe.pairs_to_probe(by_service)
    run.say(f"probing {len(pairs)} pairs with {run.options.probe_count} pings each")
    nets = run.plan.by_instance()
    measured = probe.probe(pairs, {n: nets[n].netns for n in nets}, run.plan.ip_of(),
                           run.options.probe_count)
    with run.paths_lock:
        want = {(s, d): probe.expected(run.cores[s].configured().get(d),
                                       run.cores[d].configured().get(s)) for s, d in pairs}
    run.probe_records = probe.as_records(measured, want)
    run.rundir.write_file("probe.json", json.dumps(run.probe_records, indent=1))
    for line in probe.probe_table(run.probe_records):
        run.say(line)


def report_flows(run) -> None:
    if getattr(run, "meter", None) is None:
        return
    flows = run.meter.flows()
    run.rundir.write_file("flows.json", json.dumps(flows, indent=1))
    with run.paths_lock:
        configured = {(src, dst): path for src, core in run.cores.items()
                      for dst, path in core.configured().items()}
    for line in flow_table(flows, configured):
        run.say(line)


def write_instances(run) -> None:
    final = [{"name": n.instance, "ip": n.ip, "status": run.status[n.instance],
              "network": run.network[n.instance],
              "exit_code": run.exit_codes.get(n.instance)} for n in run.plan.instances]
    run.rundir.write_file("instances.json", json.dumps(final, indent=1))
    counts: dict[str, int] = {}
    for inst in final:
        counts[inst["status"]] = counts.get(inst["status"], 0) + 1
    run.say("instances: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))


def write_event_log(run) -> None:
    if getattr(run, "player", None) is None:
        return
    log = [f.as_dict() for f in run.player.log]
    run.rundir.write_file("events.json", json.dumps(log, indent=1))
    if log:
        late = [f["lateness_us"] for f in log]
        p50, p99 = percentile(late, 0.5) / 1000, percentile(late, 0.99) / 1000
        run.say(f"events: {len(log)} applied, {run.player.pending} not reached; "
                  f"lateness p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    for fired in run.player.log:
        if fired.error:
            run.say(f"warning: event at {fired.scheduled_us / 1e6:g}s ({fired.label}) "
                      f"failed: {fired.error}")
