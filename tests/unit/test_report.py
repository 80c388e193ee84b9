"""`collapsar report`: the figures from a hand-made run directory (known
inputs, exact outputs), the page's escaping and policy, and a run
directory's planted files (symlinks, FIFOs) never read."""

import base64
import hashlib
import json
import os
import re

import numpy as np
import pytest
from span_files import RunFiles as SpanRun
from span_files import chain

from collapsar.cli import main
from collapsar.report import figures as report_figures
from collapsar.report.page import render
from collapsar.runfiles import RunDirError, RunFiles

EXPERIMENT = """\
experiment: {name: report-unit}   # </script><script>alert(1)</script>
services:
  client: {command: [sleep, "1"]}
  front: {command: [sleep, "1"]}
  db: {command: [sleep, "1"]}
links:
  - {from: client, to: front, latency: 10ms}
  - {from: front, to: db, latency: 5ms}
"""
FLOWS_CSV = """\
t_s,src,dst,measured_bps,configured_bps,share_bps,congestion_loss,cut
1.0,a,b,1000,2000,2000,0,0
1.0,b,a,10,,,0,0
2.0,a,b,3000,2000,1000,0.25,0
3.0,a,b,0,2000,1000,0,1
3.0,c,a,100000,,,0,0
"""
LINKS_CSV = """\
t_s,link,a,b,direction,capacity_bps,load_bps,utilisation
1.0,0,a,s,up,2000,1000,0.5
2.0,0,a,s,up,2000,3000,1.5
1.0,1,s,b,down,,10,
"""
RTT_CSV = """\
t_s,src,dst,sent,received,rtt_min_ms,rtt_median_ms,rtt_max_ms,configured_rtt_ms
1,a,b,5,5,10.0,10.5,12.0,10
2,a,b,4,3,10.1,11,13.5,10
2,b,a,5,0,,,,
"""
WORKLOAD_CSV = """\
t_s,client,sent,ok,err,timeout,p50_ms,p99_ms
1,client,3,2,1,0,34.9,35.9
"""


def write_run(path, requests="send_us,latency_us,status,thread,session\n"):
    """A run directory as a local run leaves it, with three traced requests."""
    spans = SpanRun(path)
    for i in range(3):
        chain(spans, i * 100.0 + 1, rtt1_ms=20.5 + i)
    spans.close(EXPERIMENT, events=[{"index": 0, "scheduled_us": 1_500_000, "applied_us": 1_500_250}])
    (path / "events.json").write_text(
        json.dumps(
            [
                {
                    "index": 0,
                    "label": "link a -- s set",
                    "scheduled_us": 1_500_000,
                    "applied_us": 1_500_250,
                    "lateness_us": 250,
                    "error": None,
                    "adhoc": False,
                }
            ]
        )
    )
    (path / "plan.json").write_text(json.dumps({"run_id": "a1b2c3", "source": "exp.yaml"}))
    (path / "topology.json").write_text(json.dumps({"experiment": "report-unit", "nodes": [], "links": []}))
    (path / "flows.json").write_text(json.dumps([{"src": "a", "dst": "b", "bytes": 500, "segments": []}]))
    (path / "series").mkdir()
    for name, text in (
        ("flows.csv", FLOWS_CSV),
        ("links.csv", LINKS_CSV),
        ("rtt.csv", RTT_CSV),
        ("workload.csv", WORKLOAD_CSV),
    ):
        (path / "series" / name).write_text(text)
    (path / "workload" / "client.requests.csv").write_text(requests)
    return path


def build(path, **kwargs):
    with RunFiles(path) as files:
        return report_figures.build(files, **kwargs)


def test_flows_are_columns_per_pair_busiest_first_and_small_ones_left_out(tmp_path):
    flows = build(write_run(tmp_path))["flows"]
    assert flows["total"] == 3
    # b -> a sent 10 bits: under 1% of c -> a's 100,000, so not drawn
    assert [(f["src"], f["dst"], f["bits"]) for f in flows["series"]] == [("c", "a", 100000), ("a", "b", 4000)]
    ab = flows["series"][1]
    assert ab["t"] == [1, 2, 3]
    assert ab["measured"] == [1000, 3000, 0]
    assert ab["configured"] == [2000, 2000, 2000]
    assert ab["share"] == [2000, 1000, 1000]
    assert ab["loss"] == [0, 0.25, 0]
    assert ab["cut"] == [0, 0, 1]
    assert flows["series"][0]["configured"] == [None]  # unlimited
    assert flows["table"] == [{"src": "a", "dst": "b", "bytes": 500, "segments": []}]
    assert [f["src"] for f in build(tmp_path, flows=1)["flows"]["series"]] == ["c"]


def test_links_rtt_events_and_run(tmp_path):
    figures = build(write_run(tmp_path))
    links = figures["links"]["series"]
    assert [(s["link"], s["direction"], s["peak"]) for s in links] == [(0, "up", 1.5), (1, "down", 0)]
    assert links[0]["utilisation"] == [0.5, 1.5] and links[1]["capacity"] == [None]
    ab, ba = figures["rtt"]["series"]
    assert (ab["src"], ab["dst"], ab["t"], ab["median"], ab["loss"]) == ("a", "b", [1, 2], [10.5, 11], [0.0, 0.25])
    assert (ba["median"], ba["loss"]) == ([None], [1.0])
    assert figures["events"] == [
        {
            "index": 0,
            "label": "link a -- s set",
            "scheduled_s": 1.5,
            "applied_s": 1.50025,
            "lateness_ms": 0.25,
            "error": None,
            "adhoc": False,
        }
    ]
    assert figures["run"]["run_id"] == "a1b2c3" and figures["run"]["experiment"] == "report-unit"
    assert figures["run"]["duration_s"] == 3  # the last second of any series
    assert figures["experiment"]["sha256"] == hashlib.sha256(EXPERIMENT.encode()).hexdigest()
    assert figures["notes"] == [
        "no provenance.json: the kernel and tool versions of the run are unknown",
        "3 flows sent; the 2 busiest are drawn (at most 40, each with at least 1% of the busiest one's bits; "
        "all are in series/flows.csv and the end table)",
    ]


def test_workload_percentiles_cdf_and_breakdown(tmp_path):
    latencies = [1000 * (i + 1) for i in range(100)]  # 1 .. 100 ms
    requests = "send_us,latency_us,status,thread,session\n" + "".join(
        f"{i},{latency},OK,0,0\n" for i, latency in enumerate(latencies)
    )
    requests += "100,0,ERR,0,0\n101,2000000,TIMEOUT,0,0\n"
    (client,) = build(write_run(tmp_path, requests))["workload"]["clients"]
    assert (client["requests"], client["ok"], client["err"], client["timeout"]) == (102, 100, 1, 1)
    assert (client["p50_ms"], client["p90_ms"], client["p99_ms"], client["max_ms"]) == (50.0, 90.0, 99.0, 100.0)
    cdf = client["cdf"]
    assert len(cdf["fraction"]) == report_figures.CDF_POINTS
    assert (cdf["fraction"][0], cdf["latency_ms"][0]) == (0.0, 1.0)
    assert (cdf["fraction"][-1], cdf["latency_ms"][-1]) == (1.0, 100.0)
    # nearest rank: the smallest latency with at least that fraction of requests at or below it
    assert cdf["fraction"][:3] == [0.0, 0.01, 0.02] and cdf["fraction"][100:102] == [0.9901, 0.9902]
    assert cdf["latency_ms"][cdf["fraction"].index(0.5)] == 50.0
    assert cdf["latency_ms"][cdf["fraction"].index(0.51)] == 51.0
    assert client["per_second"] == {"t": [1], "p50_ms": [34.9], "p99_ms": [35.9], "sent": [3]}
    text = build(tmp_path)["workload"]["breakdown_text"]
    assert text[3] == "client, whole run: 3 requests (3 ok), p50 34.900 ms, p99 35.900 ms"


def test_cdf_of_nothing_and_of_one():
    assert report_figures.cdf(np.array([])) == {"fraction": [], "latency_ms": []}
    one = report_figures.cdf(np.array([7.0]), points=4)
    assert one == {"fraction": [0.0, 0.99, 0.995, 1.0], "latency_ms": [7.0, 7.0, 7.0, 7.0]}


def test_planted_symlinks_and_fifos_are_never_read(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("t_s,src,dst,measured_bps\n1,root,password-hash-1234,5\n")
    run = write_run(tmp_path / "run")
    (run / "series" / "flows.csv").unlink()
    (run / "series" / "flows.csv").symlink_to(secret)
    os.mkfifo(run / "workload" / "client.requests.csv.tmp")
    (run / "workload" / "client.requests.csv").unlink()
    os.mkfifo(run / "workload" / "client.requests.csv")  # reading it would wait forever
    (run / "provenance.json").symlink_to(secret)
    figures = build(run)
    assert "password-hash-1234" not in json.dumps(figures)
    assert figures["flows"]["total"] == 0
    assert figures["workload"]["clients"][0]["requests"] == 0
    assert "series/flows.csv not read: a symlink (never followed)" in figures["notes"]
    assert "workload/client.requests.csv not read: not a regular file" in figures["notes"]
    assert "provenance.json not read: a symlink (never followed)" in figures["notes"]
    # a symlinked folder is not entered either
    (run / "series").rename(run / "elsewhere")
    (run / "series").symlink_to(run / "elsewhere")
    assert build(run)["rtt"]["total"] == 0


def test_a_span_file_planted_as_a_symlink_is_refused_by_trace(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    secret = tmp_path / "secret"
    secret.write_text('{"resourceSpans": "password-hash-1234"}\n')
    (run / "workload" / "evil.spans.jsonl").symlink_to(secret)
    assert main(["trace", str(run)]) == 2
    err = capsys.readouterr().err
    planted = run / "workload" / "evil.spans.jsonl"
    assert err == f"collapsar: {planted}: a symlink; expected a regular file the run wrote\n"


def test_the_page_escapes_the_data_and_allows_only_its_own_script(tmp_path):
    figures = build(write_run(tmp_path))
    script = "window.x = 1;"
    page = render(figures, script, "body{}")
    assert "</script><script>alert(1)" not in page
    assert "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)" in page
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    assert policy == f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:"
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data) == json.loads(json.dumps(figures))
    assert page.count("<script") == 2


def test_a_script_that_would_end_its_element_is_refused():
    from collapsar.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem, match="would end its inline element"):
        render({"run": {"run_id": "x"}}, 'var s = "</SCRIPT>";', "")


def test_the_command_writes_the_page_over_a_planted_symlink_never_through_it(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (run / "report.html").symlink_to(victim)
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"report: {run / 'report.html'} (")
    assert victim.read_text() == "untouched"
    assert not (run / "report.html").is_symlink()
    assert "window.collapsarReport" in (run / "report.html").read_text()
    assert [p.name for p in run.iterdir() if p.name.startswith(".report")] == []


def test_the_command_json_and_its_bad_input(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert main(["report", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flows"]["total"] == 3
    for argv, code, line in (
        (["report", str(tmp_path / "nope")], 2, f"collapsar: {tmp_path / 'nope'}: no such run directory"),
        (
            ["report", str(tmp_path / "run" / "series")],
            2,
            f"collapsar: {tmp_path / 'run' / 'series'}: no plan.json or experiment.yaml; "
            "expected the run directory of a local run",
        ),
        (["report", str(run), "--flows", "0"], 1, "collapsar: --flows 0: expected a number of flows of at least 1"),
    ):
        assert main(argv) == code, argv
        assert capsys.readouterr().err.splitlines() == [line]
    with pytest.raises(RunDirError):
        RunFiles(run / "plan.json")
