"""`collapsar run --repeat 2 --sweep` for real: a bottleneck swept over two
rates, each run twice (four short runs, about 30 s): the set directory
holds the four runs and set.json, the aggregate per value has each run's
figures (n = 2) and a measured rate that follows the swept rate, and
`collapsar report SETDIR` draws it."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from test_local_support import CLI, Cli

MBPS = 1_000_000
TOPOLOGY = """\
experiment: {name: set-run}
services:
  load: {command: [sh, -c, "sleep 0.3; iperf3 --client sink --time 4"]}
  sink: {command: [iperf3, --server, --one-off]}
bridges: [sw]
links:
  - {from: load, to: sw, bandwidth: 100Mbps}
  - {from: sw, to: sink, bandwidth: 20Mbps}
"""


@pytest.fixture(scope="module")
def run_set(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("set")
    (tmp / "set.yaml").write_text(TOPOLOGY)
    cli = Cli(
        "run",
        str(tmp / "set.yaml"),
        "--repeat",
        "2",
        "--sweep",
        "links[sw,sink].bandwidth=5Mbps,10Mbps",
        "--duration",
        "5s",  # four whole seconds of the flow: its median is not the first second's burst
        "--subnet",
        "10.83.0.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--status-port",
        "-1",
    )
    try:
        code, lines, stderr = cli.finish(180)
    finally:
        cli.kill()
    match = re.match(r"set (set-[0-9a-f]{6}): 4 runs, set directory (\S+)$", lines[0])
    assert match, lines[:3]
    return {"code": code, "lines": lines, "stderr": stderr, "dir": tmp / "runs" / match.group(1)}


def test_the_set_runs_each_value_twice_and_records_them(run_set):
    assert run_set["code"] == 0, run_set["stderr"]
    headers = [line for line in run_set["lines"] if line.startswith("== ")]
    assert headers == [
        "== links[sw,sink].bandwidth=5Mbps, run 1 of 2 ==",
        "== links[sw,sink].bandwidth=5Mbps, run 2 of 2 ==",
        "== links[sw,sink].bandwidth=10Mbps, run 1 of 2 ==",
        "== links[sw,sink].bandwidth=10Mbps, run 2 of 2 ==",
    ]
    record = json.loads((run_set["dir"] / "set.json").read_text())
    assert record["sweep"] == {"path": "links[sw,sink].bandwidth", "values": ["5Mbps", "10Mbps"]}
    assert [(r["value"], r["repeat"], r["exit_code"]) for r in record["runs"]] == [
        ("5Mbps", 1, 0),
        ("5Mbps", 2, 0),
        ("10Mbps", 1, 0),
        ("10Mbps", 2, 0),
    ]
    for run in record["runs"]:  # each run's own directory, with the variant as run
        as_run = (run_set["dir"] / run["run_id"] / "experiment.yaml").read_text()
        assert f"- {{from: sw, to: sink, bandwidth: {run['value']}}}" in as_run


def test_the_aggregate_follows_the_swept_rate(run_set):
    figures = json.loads((run_set["dir"] / "aggregate.json").read_text())
    for value, rate in zip(("5Mbps", "10Mbps"), (5 * MBPS, 10 * MBPS)):
        (variant,) = [v for v in figures["variants"] if v["value"] == value]
        assert len(variant["runs"]) == 2 and variant["failed"] == []
        flow = next(f for f in variant["aggregate"]["flows"] if (f["src"], f["dst"]) == ("load", "sink"))
        (segment,) = flow["segments"]
        assert segment["configured_bps"] == rate
        measured = segment["measured_bps"]
        assert measured["n"] == 2 and measured["ci95"][0] <= measured["mean"] <= measured["ci95"][1]
        assert 0.85 * rate <= measured["mean"] <= 1.05 * rate, measured
    table = [line for line in run_set["lines"] if line.startswith("  load -> sink")]
    assert len(table) == 2 and all("Mbit/s (configured" in line for line in table)


def test_the_report_of_the_set(run_set):
    made = subprocess.run([*CLI, "report", str(run_set["dir"])], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    page = (run_set["dir"] / "report.html").read_text()
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1))
    assert data["kind"] == "set" and [v["value"] for v in data["variants"]] == ["5Mbps", "10Mbps"]
