"""bench/fidelity_bench.py without running anything: the Kollaps Fig. 8 scenario's
flows, stages and model shares, and how a stage's rate is read from iperf3's intervals."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from collapsar.errors import CollapsarError
from collapsar.parser import parse_file

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "bench" / "kollaps-fig8.yaml"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("fidelity_bench", ROOT / "bench" / "fidelity_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flows_and_stages(bench):
    flows = bench.flows_of(parse_file(SCENARIO))
    assert [(f["client"], f["server"], f["start_s"], f["end_s"]) for f in flows] == [
        (f"c{i}", f"s{i}", 20.0 * (i - 1) + 1, 120.0) for i in range(1, 7)
    ]
    assert bench.stages_of(flows) == [
        (1.0, 21.0),
        (21.0, 41.0),
        (41.0, 61.0),
        (61.0, 81.0),
        (81.0, 101.0),
        (101.0, 120.0),
    ]


def test_the_model_gives_the_papers_shares(bench):
    experiment = parse_file(SCENARIO)
    flows = bench.flows_of(experiment)
    model = bench.model_rates(experiment, flows, bench.stages_of(flows))
    # Kollaps, EuroSys'20, section 5.4, each rate divided by 10 (Mbit/s).
    paper = [
        [5.0],
        [2.308, 2.692],
        [1.845, 2.155, 1.0],
        [1.845, 2.155, 1.0, 5.0],
        [1.689, 1.975, 1.0, 2.374, 2.962],
        [1.504, 1.755, 1.0, 2.106, 2.633, 1.0],
    ]
    for k, shares in enumerate(paper):
        got = [model[str(k)][f"c{i + 1}"] / 1e6 for i in range(len(shares))]
        assert got == pytest.approx(shares, abs=0.005), k


def test_a_stage_rate_is_the_mean_of_its_settled_intervals(bench):
    flows = [{"client": "c1", "server": "s1", "start_s": 1.0, "end_s": 41.0}]
    stages = [(1.0, 21.0), (21.0, 41.0)]
    series = {"c1": [(1.0 + k, 2.0 + k, 1e6 * (1 if k < 20 else 3)) for k in range(40)]}
    assert bench.stage_rates(series, flows, stages, settle_s=8) == {"0": {"c1": 1e6}, "1": {"c1": 3e6}}


def test_only_the_receivers_intervals_count(bench):
    sender_only = json.dumps({"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": 1}}]})
    with pytest.raises(CollapsarError, match="server with -J"):
        bench.server_intervals(sender_only)
    both = json.dumps({"server_output_json": {"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": 7}}]}})
    assert bench.server_intervals(both) == [(0, 1, 7)]
