"""What a local run writes and prints about itself: plan.json before the
network exists, the probe's table (probe.json) before t=0, and at the end the
flow table (flows.json), the event log (events.json), the instances'
fates (instances.json) and which of them failed on their own.  Functions of
the `LocalRun` they report on; they read it and never set its attributes."""

from __future__ import annotations

import json
import os
import signal

from collapsar.errors import InstanceFailure
from collapsar.manager.local.supervisor import ENDED_ON_ITS_OWN
from collapsar.manager.measure import probe, workload
from collapsar.manager.measure.flows import flow_table, limited_by
from collapsar.manager.measure.livework import WorkloadTail
from collapsar.manager.play.scheduler import percentile
from collapsar.model import service_of


def write_plan(run) -> None:
    run.rundir.write_file(
        "plan.json",
        json.dumps(
            {
                "run_id": run.run_id,
                "source": run.experiment.source,
                "subnet": run.plan.subnet,
                "bridge": run.plan.bridge,
                "netem": run.netem,
                "instances": [
                    {"name": n.instance, "ip": n.ip, "netns": n.netns, "veth": n.host_veth} for n in run.plan.instances
                ],
            },
            indent=1,
        ),
    )


def pairs_at(run, instances) -> list[tuple[str, str]]:
    """The pairs a probe measures among these instances (measure/probe.py)."""
    by_service: dict[str, list[str]] = {}
    for instance in instances:
        by_service.setdefault(service_of(run.experiment, instance), []).append(instance)
    return probe.pairs_to_probe(by_service)


def probe_pairs(run) -> None:
    """RTT, jitter and loss per pair at t=0, before any command runs (measure/probe.py)."""
    pairs = pairs_at(run, run.timeline.steps[0].state.instances)
    run.say(f"probing {len(pairs)} pairs with {run.options.probe_count} pings each")
    nets = run.plan.by_instance()
    measured = probe.probe(pairs, {n: nets[n].netns for n in nets}, run.plan.ip_of(), run.options.probe_count)
    with run.paths_lock:
        want = {
            (s, d): probe.expected(run.cores[s].configured().get(d), run.cores[d].configured().get(s)) for s, d in pairs
        }
    records = probe.as_records(measured, want)
    run.rundir.write_file("probe.json", json.dumps(records, indent=1))
    for line in probe.probe_table(records):
        run.say(line)


def report_flows(run) -> None:
    if getattr(run, "meter", None) is None:
        return
    flows = run.meter.flows()
    for flow in flows:
        for segment in flow["segments"]:
            segment["limited_by"] = limited_by(segment)  # as the end table says it, for the report
    run.rundir.write_file("flows.json", json.dumps(flows, indent=1))
    with run.paths_lock:
        configured = {(src, dst): path for src, core in run.cores.items() for dst, path in core.configured().items()}
    for line in flow_table(flows, configured):
        run.say(line)


def close_series(run) -> None:
    """The series written at the end: events, the probe's RTT, the workload."""
    run.series.events(f.as_dict() for f in run.player.log)
    if run.live_probe is not None:
        run.series.rtt(run.live_probe.rows(run.configured_rtt_ms))
    clients = {}
    for instance, start_us in run.started_us.items():
        records = workload.read_requests(run.rundir.path / workload.TRACE_DIR / f"{instance}.requests.csv")
        if records is not None:
            clients[instance] = (start_us, records)
    run.series.workload(clients)
    run.series.close()


def live_figures(run, now_us: int) -> dict:
    """The status snapshot's `probe` (each probed pair's last RTT, requests
    and replies so far, and the RTT configured now) and `workload` (each
    wl-client's requests and latency histogram so far: measure/livework.py)."""
    probe = []
    if run.live_probe is not None:
        second = max(1, now_us // 1_000_000 + 1)
        for row in run.live_probe.latest():
            probe.append({**row, "configured_rtt_ms": run.configured_rtt_ms(second, row["src"], row["dst"])})
    if run.workload_tail is None:
        try:
            folder = os.open(workload.TRACE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=run.rundir.dir_fd)
        except OSError:
            return {"probe": probe, "workload": []}
        run.workload_tail = WorkloadTail(folder, run.instances)
    run.workload_tail.poll()
    return {"probe": probe, "workload": run.workload_tail.figures()}


TAIL_LINES = 5  # of a failed instance's log, in the run's verdict
_TAIL_BYTES = 8192
_TAIL_LINE_CHARS = 200


def own_failures(run) -> list:
    """Exits no one asked for: with an error, or killed by a signal this run
    did not send.  A leave's SIGTERM, a crash's SIGKILL and the end of the
    run's SIGTERM are the timeline's or the run's doing, whatever the code
    the command then exits with (supervisor.Exit.how says who stopped it);
    the OOM killer at the instance's memory limit is not."""
    supervisor = getattr(run, "supervisor", None)
    if supervisor is None:
        return []
    return [e for e in supervisor.exits if e.how in ENDED_ON_ITS_OWN and e.returncode != 0]


def write_instances(run) -> None:
    failed = {e.instance for e in own_failures(run)}
    final = [
        {
            "name": n.instance,
            "ip": n.ip,
            "status": run.status[n.instance],
            "network": run.network[n.instance],
            "exit_code": run.exit_codes.get(n.instance),
            "failed": n.instance in failed,
        }
        for n in run.plan.instances
    ]
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
        run.say(
            f"events: {len(log)} applied, {run.player.pending} not reached; lateness p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        )
    for fired in run.player.log:
        if fired.error:
            run.say(f"warning: event at {fired.scheduled_us / 1e6:g}s ({fired.label}) failed: {fired.error}")


def raise_on_failed_instances(run) -> None:
    """After teardown: InstanceFailure (exit 6) naming each instance whose
    command failed on its own, with the last lines of its log."""
    lines = []
    for exit_ in own_failures(run):
        out_path, err_path = run.rundir.log_paths(exit_.instance)
        name, tail = next(
            ((path.name, tail) for path in (err_path, out_path) if (tail := log_tail(path))), (err_path.name, [])
        )
        if exit_.returncode == 1 and tail and tail[-1].startswith('exec of "'):
            # `ip netns exec` could not exec the program: the command never ran.
            lines.append(f"instance {exit_.instance}: could not start: {tail[-1]}")
            continue
        if exit_.how == "oom-killed":
            code = f"was killed by the kernel's OOM killer at its memory limit{_memory_of(run, exit_.instance)}"
        elif exit_.returncode > 0:
            code = f"exited with status {exit_.returncode} on its own"
        else:
            code = f"was killed by {_signal_name(-exit_.returncode)}, a signal this run did not send"
        if not tail:
            lines.append(f"instance {exit_.instance}: {code}; its log is empty")
            continue
        lines.append(f"instance {exit_.instance}: {code}; the last lines of logs/{name}:")
        lines += [f"  {exit_.instance}| {line}" for line in tail]
    if lines:
        raise InstanceFailure(lines)


def log_tail(path, count: int = TAIL_LINES) -> list[str]:
    """The last `count` non-empty lines of a log, each cut short and with
    control characters shown as `?` (they are the command's bytes, printed
    on the user's terminal)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - _TAIL_BYTES))
            text = log.read(_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    lines = [line for line in text.splitlines() if line.strip()][-count:]
    return [
        "".join(c if c.isprintable() or c == "\t" else "?" for c in line[:_TAIL_LINE_CHARS])
        + ("..." if len(line) > _TAIL_LINE_CHARS else "")
        for line in lines
    ]


def _memory_of(run, instance: str) -> str:
    limit = run.experiment.service(service_of(run.experiment, instance)).memory_bytes
    return f" (memory: {limit / 2**20:g} MiB)" if limit else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
