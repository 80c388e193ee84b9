"""bench/fidelity_bench.py without running anything: the Kollaps Fig. 8 scenario's
flows, stages and model shares, and how a stage's rate is read from iperf3's intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collapsar.errors import CollapsarError
from collapsar.parser import parse_file

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "bench" / "kollaps-fig8.yaml"


@pytest.fixture(scope="module")
def bench(load_bench):
    return load_bench("fidelity_bench")


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
    model, full = bench.model_rates(experiment, flows, bench.stages_of(flows), 1.0)  # Kollaps's 1/RTT
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
    # With CUBIC's measured weights the RTTs (70 and 60 ms) matter less.
    cubic, _ = bench.model_rates(experiment, flows, bench.stages_of(flows), 0.47)
    assert [cubic["1"][c] / 1e6 for c in ("c1", "c2")] == pytest.approx([2.410, 2.590], abs=0.001)
    # The links the model fills: b1 -> b2 (5 Mbit/s) from stage 2, b2 -> b3 (10) from stage 4.
    assert full["0"] == {}
    assert full["2"] == {"b1 -> b2": ["c1", "c2", "c3"]}
    # In stage 6 b2 -> b3 limits c1 and c2 below their b1 -> b2 shares (4.26 of 5 Mbit/s there).
    assert full["5"] == {"b2 -> b3": ["c1", "c2", "c3", "c4", "c5", "c6"]}


def test_realism_columns_and_bottleneck_totals(bench, tmp_path):
    """The summary marks a Collapsar mean inside or outside the reference's
    interval and sets the bottleneck's total in both systems side by side."""
    flows = bench.flows_of(parse_file(ROOT / "bench" / "fairness-equal-rtt.yaml"))
    stages = bench.stages_of(flows)

    def run(system, number, long_bps, short_bps):
        series = {
            "short": [(k, k + 1, short_bps) for k in range(1, 60)],
            "long": [(k, k + 1, long_bps) for k in range(31, 60)],
        }
        return {"system": system, "run": number, "took_s": 1.0, "series": series}

    raw = {
        "file": "x",
        "flows": flows,
        "stages": stages,
        "congestion_control": "reno",
        "runs": [run("collapsar", 1, 2.3e6, 2.4e6), run("collapsar", 2, 2.3e6, 2.4e6)]
        + [run("reference", 1, 2.0e6, 2.6e6), run("reference", 2, 2.2e6, 2.8e6)],
    }
    table, summary = bench.summarise(raw, parse_file(ROOT / "bench" / "fairness-equal-rtt.yaml"), 8.0, 1.0)
    # Reference long: mean 2.1, interval 2.1 +- 12.706 x 0.1 / sqrt(2) -> [1.2, 3.0]: 2.3 is inside.
    assert summary["2/long"]["inside"] is True
    assert summary["2/short"]["inside"] is True
    # Two runs of 4.7 and 5.0 in the reference, 4.7 twice in Collapsar.
    totals = summary["2/b1 -> b2"]
    assert totals["collapsar"]["mean"] == pytest.approx(4.7e6)
    assert totals["reference"]["mean"] == pytest.approx(4.8e6)
    assert "2     b1 -> b2 |" in table and "-2.1%" in table
    assert "Collapsar's mean inside the reference's interval: 3 of 3" in table
    raw["runs"][2]["series"]["short"] = [(k, k + 1, 2.8e6) for k in range(1, 60)]  # both reference runs agree
    table, summary = bench.summarise(raw, parse_file(ROOT / "bench" / "fairness-equal-rtt.yaml"), 8.0, 1.0)
    assert (summary["1/short"]["inside"], summary["2/short"]["inside"]) == (False, False)  # 2.4 against [2.8, 2.8]
    assert "Collapsar's mean inside the reference's interval: 1 of 3" in table


def test_a_stage_rate_is_the_mean_of_its_settled_intervals(bench):
    flows = [{"client": "c1", "server": "s1", "start_s": 1.0, "end_s": 41.0}]
    stages = [(1.0, 21.0), (21.0, 41.0)]
    series = {"c1": [(1.0 + k, 2.0 + k, 1e6 * (1 if k < 20 else 3)) for k in range(40)]}
    assert bench.stage_rates(series, flows, stages, settle_s=8, guard_s=0) == {"0": {"c1": 1e6}, "1": {"c1": 3e6}}


def test_the_guard_leaves_out_a_stages_last_second(bench):
    flows = [{"client": "c1", "server": "s1", "start_s": 1.0, "end_s": 41.0}]
    stages = [(1.0, 21.0), (21.0, 41.0)]
    # 2 Mbit/s, but 0.8 in the second before the next flow's start (20-21 s).
    series = {"c1": [(1.0 + k, 2.0 + k, 0.8e6 if k == 19 else 2e6) for k in range(40)]}
    # Settled part 9-21 s: twelve intervals, one of them the dip.
    assert bench.stage_rates(series, flows, stages, settle_s=8, guard_s=0)["0"]["c1"] == pytest.approx(1.9e6)
    # 9-20 s: eleven intervals, all at 2; stage 2 keeps 29-40 s.
    assert bench.stage_rates(series, flows, stages, settle_s=8, guard_s=1) == {"0": {"c1": 2e6}, "1": {"c1": 2e6}}


def test_only_the_receivers_intervals_count(bench):
    sender_only = json.dumps({"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": 1}}]})
    with pytest.raises(CollapsarError, match="server with -J"):
        bench.server_intervals(sender_only)
    both = json.dumps({"server_output_json": {"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": 7}}]}})
    assert bench.server_intervals(both) == [(0, 1, 7)]


def test_reference_runs_from_another_measurement(bench, tmp_path):
    flows = [{"client": "c1", "server": "s1", "start_s": 1.0, "end_s": 41.0}]
    run = {"took_s": 1.0, "series": {}}
    raw = {"flows": flows, "stages": [[1.0, 41.0]], "runs": [{**run, "system": "collapsar", "run": 1}]}
    (tmp_path / "raw.json").write_text(
        json.dumps({**raw, "runs": [{**run, "system": s, "run": 1} for s in ("collapsar", "reference")]})
    )
    merged = bench.with_reference_from(raw, tmp_path)
    assert [r["system"] for r in merged["runs"]] == ["collapsar", "reference"]
    assert merged["reference_from"] == str(tmp_path)
    (tmp_path / "raw.json").write_text(json.dumps({**raw, "stages": [[1.0, 21.0]]}))
    with pytest.raises(CollapsarError, match="other flows or stages"):
        bench.with_reference_from(raw, tmp_path)
