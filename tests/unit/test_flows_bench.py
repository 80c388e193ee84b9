"""bench/flows_bench.py without running anything: its scenario validates, and
transfers and pings are read from the commands' logs by phase."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collapsar.errors import CollapsarError
from collapsar.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(load_bench):
    return load_bench("flows_bench")


def test_the_scenario_is_a_valid_dumbbell_with_its_load_after_the_transfers(bench):
    experiment = parse_text(bench.scenario(), "flows.yaml")
    assert {s.name for s in experiment.services} == {"srv", "sink", "one", "eight", "bulk", "pinger"}
    bulk = " ".join(next(s for s in experiment.services if s.name == "bulk").command)
    assert "(sleep 52; iperf3 -c sink -t 20 > /dev/null) & sleep 45; exec ping -D" in bulk


def test_transfers_are_grouped_by_size_and_concurrency_and_a_failure_is_refused(bench, tmp_path):
    rows = [{"size": 10000, "parallel": 1, "round": 0, "s": 0.09}, {"size": 10000, "parallel": 1, "round": 1, "s": 0.1}]
    (tmp_path / "one.out").write_text("\n".join(map(json.dumps, rows)) + "\n")
    (tmp_path / "eight.out").write_text(json.dumps({"size": 1000000, "parallel": 8, "round": 0, "s": 6.5}) + "\n")
    assert bench.transfers(tmp_path) == {"10000/1": [0.09, 0.1], "1000000/8": [6.5]}
    (tmp_path / "eight.out").write_text(json.dumps({"size": 10, "parallel": 8, "round": 0, "error": "boom"}) + "\n")
    with pytest.raises(CollapsarError, match="eight: a transfer failed"):
        bench.transfers(tmp_path)


def test_pings_are_split_into_idle_and_the_settled_loaded_phase(bench, tmp_path):
    lines = ["PING srv (10.0.0.2) 56(84) bytes of data."]
    start = 1000.0  # the first reply: sent PING_START_S (45 s) after t=0
    for i, (after_s, rtt) in enumerate([(0, 44.1), (5.9, 44.3), (6.5, 60.0), (8.0, 90.0), (12.0, 95.0), (27.0, 99.0)]):
        lines.append(f"[{start + after_s:.6f}] 64 bytes from 10.0.0.2: icmp_seq={i + 1} ttl=64 time={rtt} ms")
    (tmp_path / "bulk.out").write_text("\n".join(lines) + "\n")
    # idle: before 51 s; loaded: 55-71 s (3 s settled after the load's start at 52 s)
    assert bench.pings(tmp_path, "bulk") == {"idle": [44.1, 44.3], "loaded": [95.0]}
    (tmp_path / "pinger.out").write_text("PING srv\n")
    with pytest.raises(CollapsarError, match="pinger: no ping replies"):
        bench.pings(tmp_path, "pinger")
