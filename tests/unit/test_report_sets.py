"""Repeated runs: the summary of a figure over runs (known inputs, exact
outputs, the t interval), the aggregate of runs' figures, a set directory
read back, `--sweep`'s edits of an experiment, and the options refused."""

import json
import math

import pytest
from test_report import write_run

from collapsar.cli import main
from collapsar.errors import CollapsarError
from collapsar.report import aggregate as agg
from collapsar.report.sets import build_set, table_lines
from collapsar.runfiles import RunDirError, RunFiles
from collapsar.sweep import parse_sweep, variant


def test_stats_of_five_runs_is_the_student_t_interval():
    s = agg.stats([1, 2, 3, 4, 5, None])  # None: the figure is absent from that run
    # sd = sqrt(2.5) = 1.5811388; t(0.975, 4) = 2.7764451; half = 2.7764451 * 1.5811388 / sqrt(5) = 1.9632432
    assert s == {
        "n": 5,
        "mean": 3.0,
        "sd": 1.58114,
        "ci95": [1.03676, 4.96324],
        "min": 1.0,
        "median": 3.0,
        "max": 5.0,
    }
    assert agg.t_quantile(2) == pytest.approx(12.7062047, abs=1e-6)
    assert agg.t_quantile(30) == pytest.approx(2.0452296, abs=1e-6)


def test_stats_of_one_run_has_no_interval_and_of_none_is_none():
    assert agg.stats([7.5]) == {"n": 1, "mean": 7.5, "sd": None, "ci95": None, "min": 7.5, "median": 7.5, "max": 7.5}
    assert agg.stats([None, None]) is None
    assert agg.stats([2, 4])["median"] == 3.0  # the mean of the two middle values


def _run(flow_rates, segments_rate, p50, lateness):
    """One run's figures, with only what the aggregate reads."""
    return {
        "flows": {
            "series": [
                {"src": "a", "dst": "b", "bits": sum(flow_rates), "t": [1.02, 2.03], "measured": flow_rates}
                | {"configured": [10, 10]}
            ],
            "table": [
                {
                    "src": "a",
                    "dst": "b",
                    "segments": [
                        {
                            "start_s": 0.0004,
                            "end_s": None,
                            "configured_bps": 10,
                            "median_rate_bps": segments_rate,
                            "median_share_bps": 10,
                            "limited_by": "its path",
                        }
                    ],
                }
            ],
        },
        "rtt": {"series": [{"src": "a", "dst": "b", "t": [1], "median": [p50], "configured": [0], "loss": [0.0]}]},
        "events": [
            {"index": 0, "label": "x", "scheduled_s": 1.0, "lateness_ms": lateness, "error": None},
            {"index": 1, "label": "y", "scheduled_s": 2.0, "lateness_ms": 2 * lateness, "error": None},
        ],
        "workload": {
            "clients": [
                {
                    "client": "c",
                    "p50_ms": p50,
                    "p90_ms": p50,
                    "p99_ms": 2 * p50,
                    "max_ms": 3 * p50,
                    "requests": 10,
                    "ok": 10,
                    "err": 0,
                    "timeout": 0,
                    "cdf": {"fraction": [0.0, 1.0], "latency_ms": [p50, 3 * p50]},
                }
            ]
        },
    }


def test_aggregate_of_three_runs():
    runs = [_run([8, 10], 9, 1.0, 0.1), _run([10, 10], 10, 2.0, 0.2), _run([12, 10], 11, 3.0, 0.3)]
    a = agg.aggregate(runs)
    assert a["runs"] == 3
    (flow,) = a["flows"]
    assert flow["measured"]["t"] == [1, 2]  # the rows' seconds, to the whole second
    assert flow["measured"]["mean"] == [10.0, 10.0] and flow["measured"]["min"] == [8.0, 10.0]
    half = 2 * agg.t_quantile(3) / math.sqrt(3)  # sd of 8, 10, 12 is 2
    assert flow["measured"]["lo"][0] == pytest.approx(10 - half, rel=1e-5)
    assert flow["measured"]["hi"][1] == 10.0  # no spread: the interval is the mean
    assert flow["configured"] == [10.0, 10.0]
    (segment,) = flow["segments"]
    assert segment["start_s"] == 0.0 and segment["measured_bps"]["mean"] == 10.0
    assert segment["measured_bps"]["ci95"] == [
        pytest.approx(10 - half / 2, rel=1e-5),
        pytest.approx(10 + half / 2, rel=1e-5),
    ]
    assert [e["lateness_ms"]["mean"] for e in a["events"]] == [0.2, 0.4]
    # per run p50 of (l, 2l) is l, p99 is 2l (nearest rank)
    assert a["lateness"]["p50_ms"]["mean"] == 0.2 and a["lateness"]["p99_ms"]["mean"] == 0.4
    (client,) = a["workload"]
    assert client["p50_ms"]["mean"] == 2.0 and client["p99_ms"]["max"] == 6.0 and len(client["cdfs"]) == 3
    (pair,) = a["rtt"]
    assert pair["median"]["mean"] == [2.0] and pair["loss"] == [0.0]


def _set_dir(tmp_path, runs):
    root = tmp_path / "set"
    root.mkdir()
    for run_id, _value, _code in runs:
        write_run(root / run_id)
    record = {
        "experiment": "exp.yaml",
        "repeat": 2,
        "sweep": {"path": "links.0.latency", "values": ["1ms", "2ms"]},
        "runs": [
            {"run_id": run_id, "value": value, "repeat": 1, "exit_code": code, "error": "x" if code else None}
            for run_id, value, code in runs
        ],
    }
    (root / "set.json").write_text(json.dumps(record))
    return root


def test_a_set_directory_read_back_per_value_leaving_failed_runs_out(tmp_path):
    root = _set_dir(tmp_path, [("aaaaa1", "1ms", 0), ("aaaaa2", "1ms", 0), ("aaaaa3", "2ms", 6), ("aaaaa4", "2ms", 0)])
    with RunFiles(root) as files:
        figures = build_set(files)
    first, second = figures["variants"]
    assert (first["value"], first["runs"], first["failed"]) == ("1ms", ["aaaaa1", "aaaaa2"], [])
    assert second["runs"] == ["aaaaa4"] and second["failed"] == [{"run_id": "aaaaa3", "exit_code": 6, "error": "x"}]
    assert first["aggregate"]["runs"] == 2 and second["aggregate"]["runs"] == 1
    lines = table_lines(figures)
    assert lines[0] == "over the runs that completed: mean ± half-width of its 95% confidence interval"
    assert lines[1] == "links.0.latency=1ms: 2 runs completed"
    assert "  c -> a  " not in "\n".join(lines)  # flows.json of these runs has only a -> b
    assert any(line.startswith("links.0.latency=2ms: 1 runs completed, 1 failed") for line in lines)


def test_a_set_naming_a_run_outside_itself_is_refused(tmp_path):
    root = _set_dir(tmp_path, [("aaaaa1", "1ms", 0)])
    record = json.loads((root / "set.json").read_text())
    record["runs"][0]["run_id"] = "../../etc"
    (root / "set.json").write_text(json.dumps(record))
    with RunFiles(root) as files, pytest.raises(RunDirError, match="six-hex-digit run ids"):
        build_set(files)
    # a run directory planted as a symlink is not followed
    record["runs"][0]["run_id"] = "bbbbb1"
    (root / "set.json").write_text(json.dumps(record))
    (root / "bbbbb1").symlink_to(root / "aaaaa1")
    with RunFiles(root) as files, pytest.raises(RunDirError, match="a symlink"):
        build_set(files)


TEXT = """\
experiment: {name: sweep}   # a comment is lost, values are not
services:
  a: {command: [sleep, 10]}
  b: {command: [sh, -c, "echo on"], replicas: 2}
bridges: [sw]
links:
  - {from: a, to: sw, latency: 5ms}
  - {from: sw, to: b, latency: 5ms, bandwidth: 10Mbps}
"""


def test_sweep_edits_one_property_and_keeps_everything_else_as_written():
    sweep = parse_sweep("links[b,sw].latency=1ms,2ms")
    assert sweep.values == ("1ms", "2ms")
    out = variant(TEXT, sweep, "2ms")
    assert "- {from: sw, to: b, latency: 2ms, bandwidth: 10Mbps}" in out
    assert "- {from: a, to: sw, latency: 5ms}" in out
    assert "command: [sleep, 10]" in out and '"echo on"' in out  # a number stays a number, a string quoted
    assert "jitter: 1ms" in variant(TEXT, parse_sweep("links.0.jitter=1ms"), "1ms")  # a new key is added
    assert "replicas: 3" in variant(TEXT, parse_sweep("services.b.replicas=3"), "3")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("links[a,b].latency=1ms", "--sweep links[a,b].latency: no link between a and b"),
        ("links.7.latency=1ms", "--sweep links.7.latency: '7' is not an index of a list of 2"),
        ("services.c.replicas=1", "--sweep services.c.replicas: the experiment has no 'c' there"),
        ("services.a.command.0.x=1", "--sweep services.a.command.0.x: 'x' goes into a scalar, not a mapping or list"),
    ],
)
def test_sweep_paths_that_do_not_fit_the_experiment(spec, message):
    sweep = parse_sweep(spec)
    with pytest.raises(CollapsarError) as error:
        variant(TEXT, sweep, sweep.values[0])
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--repeat", "0"], "collapsar: --repeat 0: expected a number of runs from 1 to 1000"),
        (["--repeat", "2", "--vm"], "collapsar: --repeat cannot be combined with --vm"),
        (["--sweep", "links.0.latency=1ms", "--dry-run"], "collapsar: --sweep cannot be combined with --dry-run"),
        (
            ["--sweep", "links.0.latency"],
            "collapsar: --sweep links.0.latency: expected PATH=V1,V2,... such as "
            "'links[sw,core].latency=10ms,20ms,40ms'",
        ),
        (["--sweep", "links.0.latency=1ms,1ms"], "collapsar: --sweep links.0.latency=1ms,1ms: a value is listed twice"),
    ],
)
def test_set_options_refused_before_anything_runs(tmp_path, capsys, argv, line):
    (tmp_path / "e.yaml").write_text(TEXT)
    assert main(["run", str(tmp_path / "e.yaml"), *argv]) == 1
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_swept_value_the_experiment_refuses_names_the_variant(tmp_path, capsys):
    (tmp_path / "e.yaml").write_text(TEXT)
    assert main(["run", str(tmp_path / "e.yaml"), "--sweep", "links.0.latency=1ms,-3ms"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"{tmp_path / 'e.yaml'} (links.0.latency=-3ms):7: link a -> sw: latency: expected a duration like 10ms, "
        "250us or 1.5s, got '-3ms'\n"
    )
