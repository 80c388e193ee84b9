"""What the CPU speed tests of the kernel tier (tests/kernel/test_local_cpu_speed.py,
this host's cgroup v1) and the VM tier (tests/vm/test_cpu_speed_vm.py, a
stock kernel's cgroup v2) share: real `collapsar run`s with `cpu-speed`,
measured from outside Collapsar.

- `spin_shares`: instances that spin, alone in their run; the share of a CPU
  each process gets is its run time (/proc/PID/schedstat) over a few
  seconds of wall time.  A CPU-bound program under the quota runs at full
  speed for its share of the time, so its share is its achieved speed.
- `compute_latencies`: one wl-node at speed 1 and one at 0.5, both on CPU 1,
  and a closed-loop wl-client per node and COMPUTE mode (thread CPU time,
  calibrated loop, wall clock), one after the other; each client's median
  request latency from its per-request records (-o).  A third node, at
  speed 0.25 and serving nobody, is there for its loop's calibration: each
  node's, from the line it logs at start."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from limits_support import cmdline, cpu_share, launch, wait_for

from collapsar.manager.programs import workload_build_dir

SPIN = "while :; do :; done"
COMPUTE_MS = 40
REQUESTS = 8
# Between one client's join and the next: its requests take under 1 s even
# at speed 0.5 in the VM, and the next join's set-up (namespace, veth,
# classes: seconds of CPU under emulation) would otherwise run on their core
# during the last of them (measured in the VM tier: the slow loop's last
# requests at 105-118 ms where its first took 85-90).
CLIENT_GAP_S = 2.0
MODES = ("cpu", "loop", "wall")  # -C TIME, -C TIME,loop, -C TIME,wall
BRING_UP_S = 240  # a run's start takes over a minute in the VM tier's emulated VM on a busy host


def spin_shares(tmp_path: Path, service: str, processes: int, seconds: float = 4.0) -> list[float]:
    """Each of `processes` spinners' share of a CPU, in one instance that
    has `service`'s limits (a flow mapping's keys, without the command),
    alone in its run: a spinner beside another instance on its core waits
    its turn while the instance's other threads use the shared quota
    (docs/language.md, "CPU speed"), so two cases never share a run."""
    spinners = " & ".join([f"sh -c '{SPIN}'"] * processes) + " & wait"
    topology = (
        "experiment: {name: cpu-speed}\nservices:\n"
        f'  busy: {{command: [sh, -c, "{spinners}"], {service}}}\n'
        "links: []\n"
    )
    run = launch(tmp_path, topology)
    try:
        run.wait_started(1, BRING_UP_S)
        parent = run.pids["busy"]

        def spinning():
            pids = [int(c) for c in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]
            return pids if len(pids) == processes and all(cmdline(p)[-1:] == [SPIN] for p in pids) else None

        pids = wait_for("every spinner", spinning, BRING_UP_S)
        time.sleep(1.0)  # past the start, in the quota's steady state
        shares = _shares(pids, seconds)
        assert run.finish(timeout_s=BRING_UP_S) == 0, run.err.read_text()
        return shares
    finally:
        run.abandon()


def _shares(pids: list[int], seconds: float) -> list[float]:
    if len(pids) == 1:
        return [cpu_share(pids[0], seconds)]
    from limits_support import run_seconds

    ran, began = [run_seconds(p) for p in pids], time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - began
    return [(run_seconds(p) - r) / wall for p, r in zip(pids, ran)]


def _client(name: str, target: str, mode: str, out: Path) -> str:
    op = f"{COMPUTE_MS}ms" if mode == "cpu" else f'"{COMPUTE_MS}ms,{mode}"'  # quoted: a comma splits a flow list
    return f"  {name}: {{command: [wl-client, --to, {target}, -C, {op}, -n, '{REQUESTS}', -o, {out}], replicas: 0}}\n"


def compute_latencies(
    tmp_path: Path, records: dict[tuple[str, str], list[tuple[float, float]]] | None = None
) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """(node, mode) -> median latency in ms of `REQUESTS` COMPUTEs of
    COMPUTE_MS; and node -> its loop's calibration, iterations per us.
    `records`, if given, gets each client's requests: (sent at, s after the
    client started; latency, ms)."""
    if not (workload_build_dir() / "wl-client").exists():
        raise AssertionError(f"wl-client is not built in {workload_build_dir()}: make -C workload-node")
    clients, events, links, outs = "", "", "", {}
    at_s = 1.0
    for mode in MODES:
        for node in ("fast", "slow"):
            name = f"{node}-{mode}"
            outs[(node, mode)] = tmp_path / f"{name}.records"  # not .csv: that is DistWalk's layout
            clients += _client(name, node, mode, outs[(node, mode)])
            events += f"  - {{at: {at_s:g}s, service: {name}, action: join}}\n"
            links += f"  - {{from: {name}, to: s, bandwidth: 100Mbps}}\n"
            at_s += CLIENT_GAP_S
    topology = (
        "experiment: {name: cpu-speed-compute}\n"
        "services:\n"
        '  fast: {command: [wl-node], cpuset: "1", cpu-speed: 1}\n'
        '  slow: {command: [wl-node], cpuset: "1", cpu-speed: 0.5}\n'
        '  crawl: {command: [wl-node], cpuset: "0", cpu-speed: 0.25}\n'
        f"{clients}bridges: [s]\nlinks:\n"
        "  - {from: fast, to: s, bandwidth: 100Mbps}\n"
        "  - {from: slow, to: s, bandwidth: 100Mbps}\n"
        "  - {from: crawl, to: s, bandwidth: 100Mbps}\n"
        f"{links}events:\n{events}"
    )
    run = launch(tmp_path, topology, "--duration", f"{at_s + 0.5:g}s")
    try:
        code = run.proc.wait(BRING_UP_S + at_s)
        assert code == 0, run.output()
    finally:
        run.abandon()
    (run_dir,) = run.runs.iterdir()
    calibrated = {node: _calibration(run_dir / "logs" / f"{node}.err") for node in ("fast", "slow", "crawl")}
    requests = {key: _requests(path) for key, path in outs.items()}
    if records is not None:
        records.update({key: [(sent / 1e6, ms) for sent, ms in got] for key, got in requests.items()})
    return {key: statistics.median(ms for _, ms in got) for key, got in requests.items()}, calibrated


def _calibration(log: Path) -> float:
    """From wl-node's `wl-node: calibrated loop: 615.7 iterations/us`."""
    for line in log.read_text().splitlines():
        if "calibrated loop:" in line:
            return float(line.split("calibrated loop:")[1].split()[0])
    raise AssertionError(f"{log}: no calibration line in {log.read_text()!r}")


def _requests(path: Path) -> list[tuple[float, float]]:
    """A client's answered requests: (sent at, us; latency, ms)."""
    got = []
    for line in path.read_text().splitlines():
        fields = line.split(",")  # send_us,latency_us,status,thread,session (a header first)
        if len(fields) >= 3 and fields[2] == "OK":
            got.append((float(fields[0]), float(fields[1]) / 1000))
    assert len(got) == REQUESTS, f"{path}: {path.read_text()}"
    return got
