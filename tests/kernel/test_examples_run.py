"""The examples without delay, jitter or loss, run on this host's kernel as a
user runs them (`collapsar run topologies/NAME`, to their own end), each
asserted on what it is there to show.  The examples that need netem run in
the VM (tests/vm/test_examples_vm.py); tests/unit/test_topologies.py checks
that the two lists hold every example."""

from __future__ import annotations

import csv
import statistics

import pytest
from examples_support import HOST_EXAMPLES, run_example

from collapsar.manager.measure.flows import limited_by

MBPS = 1_000_000


def test_this_module_runs_the_host_examples():
    assert {"local-iperf.yaml", "dumbbell-sharing.yaml"} == set(HOST_EXAMPLES)


@pytest.mark.timing  # measured rates against configured ones
def test_local_iperf_holds_each_rate_and_applies_the_change(tmp_path):
    run = run_example("local-iperf.yaml", tmp_path, timeout_s=120)
    assert run.code == 0, run.describe()
    assert "stopping: every command has exited" in run.stdout
    assert {name: i["status"] for name, i in run.instances().items()} == {
        "server": "exited(0)",
        "client": "exited(0)",
        "client-b": "exited(0)",
    }
    (event,) = run.events()
    assert (event["label"], event["error"]) == ("link client-b -- switch set", None)
    flows = run.flows()
    (whole,) = flows[("client", "server")]["segments"]
    assert whole["configured_bps"] == 50 * MBPS
    assert 0.95 * 50 * MBPS <= whole["median_rate_bps"] <= 1.02 * 50 * MBPS
    before, after = flows[("client-b", "server")]["segments"]
    assert (before["configured_bps"], after["configured_bps"]) == (20 * MBPS, 5 * MBPS)
    assert abs(before["end_s"] - 4.0) < 0.05
    assert 0.95 * 20 * MBPS <= before["median_rate_bps"] <= 1.02 * 20 * MBPS
    assert 0.95 * 5 * MBPS <= after["median_rate_bps"] <= 1.02 * 5 * MBPS


@pytest.mark.timing  # measured shares of the bottleneck
def test_dumbbell_sharing_splits_the_bottleneck(tmp_path):
    run = run_example("dumbbell-sharing.yaml", tmp_path, timeout_s=120)
    assert run.code == 0, run.describe()
    assert "stopping: every command has exited" in run.stdout
    assert {i["status"] for i in run.instances().values()} == {"exited(0)"}
    assert run.events() == []
    flows = run.flows()
    a, b = flows[("a", "ra")], flows[("b", "rb")]
    # Each path alone is 20 Mbit/s: without sharing b would get that; it gets half.
    assert [s["configured_bps"] for s in b["segments"]] == [20 * MBPS]
    assert 0.8 * 10 * MBPS <= b["median_rate_bps"] <= 1.15 * 10 * MBPS
    # ... and the end table says why: its share, not its path, capped it.
    (segment,) = b["segments"]
    assert 0.9 * 10 * MBPS <= segment["median_share_bps"] <= 1.1 * 10 * MBPS
    assert limited_by(segment) == segment["limited_by"] == "its share"  # flows.json says it as the table does
    row = next(line for line in run.stdout.splitlines() if line.startswith("b -> rb"))
    share = f"{segment['median_share_bps'] / 1e6:.3g} Mbit/s"
    assert f"20 Mbit/s        {share}" in row and "  its share  " in row, row
    # The series (series/flows.csv, one row a second) tell the same story:
    # b's per-second rates and shares have the segment's medians.
    with open(run.dir / "series" / "flows.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if (r["src"], r["dst"]) == ("b", "rb")]
    assert len(rows) >= 5
    assert {r["configured_bps"] for r in rows} == {str(20 * MBPS)}
    measured = statistics.median(int(r["measured_bps"]) for r in rows)
    shares = statistics.median(int(r["share_bps"]) for r in rows)
    assert abs(measured - b["median_rate_bps"]) <= 0.1 * b["median_rate_bps"], (measured, b["median_rate_bps"])
    assert abs(shares - segment["median_share_bps"]) <= 0.05 * segment["median_share_bps"]
    # a shares for 6 s, then has the link alone for 6 s: about three times b's bytes.
    assert 2.3 <= a["bytes"] / b["bytes"] <= 3.5, (a["bytes"], b["bytes"])
