"""Running the examples of topologies/ as a user would, and reading what a run left.

Every example is run by a test: on this host's kernel (tests/kernel/
test_examples_run.py) when it needs no netem, in the stock-kernel VM
(tests/vm/test_examples_vm.py) when it has delay, jitter or loss.
HOST_EXAMPLES and VM_EXAMPLES say which; tests/unit/test_topologies.py checks
that together they are every example, each in the tier it needs."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = ROOT / "topologies"
HOST_EXAMPLES = (
    "background.yaml",
    "cloud-egress.yaml",
    "dumbbell-sharing.yaml",
    "local-iperf.yaml",
    "slow-cpu.yaml",
    "traced-link.yaml",
)
VM_EXAMPLES = ("churn.yaml", "demo.yaml", "dumbbell.yaml", "flaky.yaml", "geo.yaml", "three-tier.yaml")
SUBNET = "10.87.0.0/24"


def needs_netem(path: Path) -> bool:
    """What `collapsar run` decides for this file: any path with delay, jitter or loss."""
    from collapsar.manager.core import needs_netem as paths_need_netem
    from collapsar.manager.experiment import timeline_paths
    from collapsar.parser import parse_file
    from collapsar.timeline import build_timeline

    return paths_need_netem(timeline_paths(build_timeline(parse_file(path))))


@dataclass
class ExampleRun:
    name: str
    code: int
    stdout: str
    stderr: str
    dir: Path

    def json(self, name: str):
        return json.loads((self.dir / name).read_text())

    def instances(self) -> dict[str, dict]:
        return {record["name"]: record for record in self.json("instances.json")}

    def events(self) -> list[dict]:
        return self.json("events.json")

    def flows(self) -> dict[tuple[str, str], dict]:
        return {(flow["src"], flow["dst"]): flow for flow in self.json("flows.json")}

    def summary(self, instance: str) -> dict:
        """wl-client's summary (RUNDIR/workload/INSTANCE.summary.json)."""
        return json.loads((self.dir / "workload" / f"{instance}.summary.json").read_text())

    def requests(self, instance: str) -> list[dict]:
        """wl-client's per-request records: send_us (from the client's start), latency_us, status."""
        with (self.dir / "workload" / f"{instance}.requests.csv").open() as handle:
            return [
                {**row, "send_us": float(row["send_us"]), "latency_us": float(row["latency_us"])}
                for row in csv.DictReader(handle)
            ]

    def applied_s(self) -> list[float]:
        """When each step of the timeline was in force, in s from t=0 (a busy
        VM can be late by seconds)."""
        return [event["applied_us"] / 1e6 for event in self.events()]

    def client_start_s(self, instance: str) -> float:
        """When a wl-client's request times start, in s from t=0: from its first
        span's wall-clock start, the run's wall-clock t=0 (RUNDIR/t0) and that
        request's send time.  A join is late by its process start, up to a
        second or more in the VM."""
        t0_s = float((self.dir / "t0").read_text())
        with (self.dir / "workload" / f"{instance}.spans.jsonl").open() as handle:
            first = json.loads(handle.readline())
        starts = [
            int(span["startTimeUnixNano"])
            for resource in first["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        ]
        first_send_us = min(record["send_us"] for record in self.requests(instance))
        return min(starts) / 1e9 - t0_s - first_send_us / 1e6

    def describe(self) -> str:
        return f"{self.name}: exit {self.code}\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"


def run_example(name: str, tmp: Path, duration: str | None = None, timeout_s: float = 300) -> ExampleRun:
    """`collapsar run topologies/NAME` as it is written, optionally shortened."""
    # The default grace (5 s): a client stopped at the end waits up to 1 s for
    # its last replies, then writes its records.
    argv = [
        sys.executable,
        "-m",
        "collapsar.cli",
        "run",
        str(TOPOLOGIES / name),
        "--subnet",
        SUBNET,
        "--run-dir",
        str(tmp),
    ]
    if duration:
        argv += ["--duration", duration]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    dirs = [path for path in tmp.iterdir() if path.is_dir()]
    assert len(dirs) == 1, f"{name}: expected one run directory in {tmp}, got {dirs}\n{done.stderr[-3000:]}"
    return ExampleRun(name, done.returncode, done.stdout, done.stderr, dirs[0])


def window(records: list[dict], start_s: float, end_s: float, offset_s: float) -> list[dict]:
    """Requests sent between start_s and end_s of the run, for a client that started at offset_s."""
    return [r for r in records if start_s <= offset_s + r["send_us"] / 1e6 < end_s]


def ok_ratio(records: list[dict]) -> float:
    assert records, "no requests in this window"
    return sum(r["status"] == "OK" for r in records) / len(records)


def median_latency_ms(records: list[dict]) -> float:
    ok = [r["latency_us"] / 1000 for r in records if r["status"] == "OK"]
    assert ok, "no request got a reply in this window"
    return statistics.median(ok)
