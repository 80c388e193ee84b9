"""A local run whose links follow rate traces, on this host's kernel (htb
only: no netem here, so rates alone; tests/vm/test_trace_vm.py does latency
and loss).

One run, two traced links, each carrying a UDP sender faster than the link
(tests/rate_sink.py: 12 Mbit/s of payload), so the link's queue is never
empty and what reaches the receiver is the link's rate:
- `load` follows 4 steps of 1 s (8, 2, 5, 1 Mbit/s) from 1 s: each second's
  delivered rate is held to the trace within 5%;
- `fast` alternates 8 and 2 Mbit/s every 100 ms, the finest step a trace
  may have (collapsar.linktraces.compile.MIN_STEP_US): each 100 ms window within
  10% (a window holds 17 to 69 datagrams: one more or less is 1.5-6%).
The windows are the run's own (RUNDIR/t0 and the receiver's clock, the same
host's), aligned with the steps, so no window straddles a step; the first
second (the senders start) is left out.  Its figures are printed, and
docs/language.md quotes them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rate_sink import link_bps, per_window

from collapsar.parser import parse_file

ROOT = Path(__file__).resolve().parents[2]
SINK = [sys.executable, str(ROOT / "tests" / "rate_sink.py")]
STEPS_MBPS = (8, 2, 5, 1)
FAST_WINDOWS = 40  # 4 s of 100 ms steps


def topology(folder: Path) -> str:
    def sink(port: int, name: str) -> str:
        return str([*SINK, "sink", str(port), str(folder / name), "7.5"])

    def send(dst: str, port: int) -> str:
        return str([*SINK, "send", dst, str(port), "12e6", "6"])

    return f"""\
experiment: {{name: trace-rates}}
services:
  sink: {{command: {sink(5201, "sink.csv")}}}
  load: {{command: {send("sink", 5201)}}}
  fast-sink: {{command: {sink(5202, "fast-sink.csv")}}}
  fast: {{command: {send("fast-sink", 5202)}}}
bridges: [sw]
links:
  - {{from: load, to: sw, bandwidth: 10Mbps, trace: {{file: traces/steps.csv, at: 1s}}}}
  - {{from: fast, to: sw, bandwidth: 10Mbps, trace: {{file: traces/fast.csv, step: 100ms, at: 1s}}}}
  - {{from: sink, to: sw, bandwidth: 1Gbps}}
  - {{from: fast-sink, to: sw, bandwidth: 1Gbps}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trace-rates")
    (folder / "traces").mkdir()
    rows = "".join(f"{k}s,{rate}Mbps\n" for k, rate in enumerate(STEPS_MBPS))
    (folder / "traces" / "steps.csv").write_text("# four steps of a second\ntime,bandwidth\n" + rows)
    fast = "".join(f"{k * 100},{8 if k % 2 == 0 else 2}\n" for k in range(FAST_WINDOWS))
    (folder / "traces" / "fast.csv").write_text("time_ms,bandwidth_mbps\n" + fast)
    (folder / "trace-rates.yaml").write_text(topology(folder))
    argv = ["run", str(folder / "trace-rates.yaml"), "--run-dir", str(folder / "runs"), "--subnet", "10.86.0.0/24"]
    done = subprocess.run(
        [sys.executable, "-m", "collapsar.cli", *argv, "--duration", "12s"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (folder / "runs").iterdir()
    t0 = float((run_dir / "t0").read_text())
    return {"folder": folder, "dir": run_dir, "stdout": done.stdout, "t0": t0}


def test_the_timeline_has_each_step_at_its_time(run):
    experiment = parse_file(run["folder"] / "trace-rates.yaml")
    steps = sorted({event.at_us for event in experiment.events})
    assert steps == [1_000_000 + k * 100_000 for k in range(FAST_WINDOWS)]
    assert "events: 40 applied, 0 not reached" in run["stdout"]


@pytest.mark.timing  # delivered rates against the trace, per second
def test_each_second_carries_the_traces_rate(run):
    delivered = per_window(run["folder"] / "sink.csv", run["t0"], 1.0, 6)
    measured = [link_bps(size, 1.0) / 1e6 for size in delivered]
    print(f"1 s steps {STEPS_MBPS} Mbit/s: delivered per second from 1 s {[round(m, 3) for m in measured[1:5]]}")
    for got, want in zip(measured[1:5], STEPS_MBPS):
        assert abs(got - want) <= 0.05 * want, (measured, STEPS_MBPS)
    # After its last step the link keeps it.
    assert abs(measured[5] - 1) <= 0.05, measured


@pytest.mark.timing  # delivered rates against the trace, per 100 ms
def test_each_100ms_step_carries_its_rate(run):
    delivered = per_window(run["folder"] / "fast-sink.csv", run["t0"], 0.1, 10 + FAST_WINDOWS)
    measured = [link_bps(size, 0.1) / 1e6 for size in delivered[10:]]
    expected = [8 if k % 2 == 0 else 2 for k in range(FAST_WINDOWS)]
    errors = [abs(got - want) / want for got, want in zip(measured, expected)]
    print(f"100 ms steps of 8 and 2 Mbit/s: worst window {max(errors):.1%} off, mean {sum(errors) / len(errors):.1%}")
    assert max(errors) <= 0.10, list(zip(expected, [round(m, 2) for m in measured]))
