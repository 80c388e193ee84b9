"""`collapsar trace --json` on hand-made run directories: the latency
summary (counts by status, nearest-rank percentiles), the breakdown's
medians and means, configured RTTs that change at an event's applied time,
and the JSON shape the issue names."""

import json

import pytest
from span_files import RunFiles, chain

from collapsar.cli import main

EXPERIMENT = """\
experiment: {name: trace-test}
services:
  client: {command: [sleep, "1"]}
  front: {command: [sleep, "1"]}
  db: {command: [sleep, "1"]}
  other: {command: [sleep, "1"]}
bridges: [s1]
links:
  - {from: client, to: front, latency: 10ms}
  - {from: front, to: s1, latency: 2ms}
  - {from: s1, to: db, latency: 3ms}
  - {from: other, to: s1, latency: 1ms}
events:
  - {at: 5s, link: [other, s1], set: {latency: 9ms}}
  - {at: 10s, link: [s1, db], set: {latency: 13ms}}
  - {at: 15s, link: [client, front], set: {bandwidth: 5Mbps}}
"""
# Steps as the run applied them: the event log's times, 0.4 ms late.
EVENTS = [
    {"index": 0, "label": "link other -- s1 set", "scheduled_us": 5_000_000, "applied_us": 5_000_400, "adhoc": False},
    {"index": 1, "label": "link s1 -- db set", "scheduled_us": 10_000_000, "applied_us": 10_000_400, "adhoc": False},
    {
        "index": 2,
        "label": "link client -- front set",
        "scheduled_us": 15_000_000,
        "applied_us": 15_000_400,
        "adhoc": False,
    },
]


def trace_json(run_dir, capsys) -> dict:
    assert main(["trace", str(run_dir), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def entries(summary: dict, from_s: float) -> dict:
    out = {}
    for b in summary["breakdown"]:
        if b["from_s"] == from_s:
            where = (b["from"], b["to"]) if b["kind"] == "network" else b["instance"]
            out[(b["kind"], where)] = b
    return out


@pytest.fixture
def event_run(tmp_path):
    """20 requests a second for 20 s; front -> db measures 10.4 ms, then 30.4 ms
    once the event is in force."""
    files = RunFiles(tmp_path)
    for i in range(400):
        at = i * 50.0 + 1
        chain(
            files,
            at,
            rtt1_ms=20.6,
            rtt2_ms=10.4 if at < 10_000.4 else 30.4,
            compute1_ms=2.0,
            compute2_ms=1.0,
            queue1_us=100 if i % 2 else 0,
        )
    return files.close(EXPERIMENT, EVENTS)


def test_configured_rtt_changes_at_the_applied_time_of_the_event(event_run, capsys):
    summary = trace_json(event_run, capsys)
    (client,) = summary["clients"]
    # The event on other's link changes none of this client's paths: no cut at 5 s;
    # a new rate on client -- front cuts at 15 s, its RTT the same.
    assert [(s["from_s"], s["until_s"], s["count"]) for s in client["segments"]] == [
        (0.0, 10.0004, 200),
        (10.0004, 15.0004, 100),
        (15.0004, None, 100),
    ]
    assert entries(summary, 15.0004)[("network", ("client", "front"))]["expected_ms"] == 20.0
    before, after = entries(summary, 0.0), entries(summary, 10.0004)
    assert before[("network", ("client", "front"))]["expected_ms"] == 20.0
    assert before[("network", ("front", "db"))]["expected_ms"] == 10.0
    assert after[("network", ("front", "db"))]["expected_ms"] == 30.0
    assert before[("network", ("front", "db"))]["median_ms"] == 10.4
    assert after[("network", ("front", "db"))]["median_ms"] == 30.4
    assert after[("network", ("client", "front"))]["median_ms"] == 20.6
    # Half the requests queued 0.1 ms more: the nearest-rank median is the lower middle.
    assert [s["p50_ms"] for s in client["segments"]] == [34.4, 54.4, 54.4]  # 20.6 + 2 + 0.3 + 10.4|30.4 + 1.1
    assert [s["max_ms"] for s in client["segments"]] == [34.5, 54.5, 54.5]


def test_breakdown_medians_means_expectations_and_waits(event_run, capsys):
    summary = trace_json(event_run, capsys)
    before = entries(summary, 0.0)
    # In path order (queueing on front comes before its compute; the client's
    # wait to read the reply, none here, last).
    assert list(before) == [
        ("network", ("client", "front")),
        ("wait", "front"),
        ("compute", "front"),
        ("network", ("front", "db")),
        ("compute", "db"),
        ("wait", "db"),
        ("wait", "client"),
    ]
    assert (before[("wait", "client")]["median_ms"], before[("wait", "client")]["count"]) == (0.0, 200)
    compute = before[("compute", "front")]
    assert (compute["median_ms"], compute["expected_ms"], compute["count"]) == (2.0, 2.0, 200)
    wait = before[("wait", "front")]
    # Half the requests queued 0.1 ms on front: nearest-rank median is the lower middle.
    assert (wait["median_ms"], wait["queue_median_ms"], wait["forward_median_ms"]) == (0.3, 0.0, 0.2)
    assert wait["mean_ms"] == 0.35
    assert "expected_ms" not in wait and "expected_ms" not in before[("wait", "db")]
    client = summary["clients"][0]["segments"][0]
    assert sum(b["mean_ms"] for b in before.values()) == pytest.approx(client["mean_ms"], abs=0.002)


def test_json_shape(event_run, capsys):
    summary = trace_json(event_run, capsys)
    assert {"clients", "breakdown", "spans", "requests", "incomplete", "notes", "run_dir"} <= set(summary)
    assert summary["spans"] == 400 * 7 and summary["requests"] == 400 and summary["notes"] == []
    (client,) = summary["clients"]
    assert {"instance", "count", "p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "by_status"} <= set(client)
    assert (client["instance"], client["count"], client["by_status"]) == (
        "client",
        400,
        {"ok": 400, "error": 0, "timeout": 0},
    )
    for b in summary["breakdown"]:
        assert b["kind"] in ("network", "compute", "storage", "wait")
        assert ({"from", "to"} <= set(b)) == (b["kind"] == "network") != ("instance" in b)
        assert isinstance(b["median_ms"], float) and b["client"] == "client"


def test_percentiles_are_nearest_rank_over_ok_requests(tmp_path, capsys):
    files = RunFiles(tmp_path)
    for i in range(1, 1001):  # durations 1..1000 ms, in a shuffled order
        ms = (i * 389) % 1000 + 1
        request = files.request("client", i * 10.0, ms)
        files.serve("front", request, i * 10.0, 0.0)
    for status in ("error", "timeout", "timeout"):
        files.request("client", 20_000, 5000, status=status)
    summary = trace_json(files.close(), capsys)
    (client,) = summary["clients"]
    assert client["by_status"] == {"ok": 1000, "error": 1, "timeout": 2}
    assert client["count"] == 1003
    assert [client[k] for k in ("p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "max_ms")] == [
        500.0,
        900.0,
        990.0,
        999.0,
        1000.0,
    ]
    # Failed requests stay out of the breakdown, and so out of its counts.
    (network, wait, reading) = summary["breakdown"]
    assert network["count"] == wait["count"] == reading["count"] == 1000 and network["median_ms"] == 500.0
    assert (wait["instance"], reading["instance"], reading["median_ms"]) == ("front", "client", 0.0)


def test_incomplete_requests_are_counted_and_left_out(tmp_path, capsys):
    files = RunFiles(tmp_path)
    chain(files, 0, rtt1_ms=20)
    chain(files, 100, rtt1_ms=22)
    files.request("client", 200, 90)  # front's spans of it never arrived
    summary = trace_json(files.close(), capsys)
    assert summary["incomplete"] == 1 and summary["clients"][0]["incomplete"] == 1
    net = entries(summary, 0.0)[("network", ("client", "front"))]
    assert (net["count"], net["median_ms"]) == (2, 20.0)
    assert summary["clients"][0]["p50_ms"] == 35.4  # of 33.4, 35.4 and 90: the latency still counts it


def test_without_experiment_or_t0_no_expectation_and_a_note(tmp_path, capsys):
    files = RunFiles(tmp_path)
    chain(files, 0)
    summary = trace_json(files.close(t0=False), capsys)
    assert all("expected_ms" not in b for b in summary["breakdown"] if b["kind"] == "network")
    assert summary["notes"] == [f"no {tmp_path / 'experiment.yaml'}: configured RTTs are not shown"]
    (tmp_path / "experiment.yaml").write_text(EXPERIMENT)
    summary = trace_json(tmp_path, capsys)
    assert summary["notes"] == [f"no {tmp_path / 't0'} (the run never reached t=0): configured RTTs are not shown"]


def test_an_ad_hoc_change_ends_the_configured_rtts(tmp_path, capsys):
    files = RunFiles(tmp_path)
    for i in range(20):
        chain(files, i * 1000.0 + 1)
    adhoc = {
        "index": 2,
        "label": "ad-hoc: link front -- s1 set",
        "scheduled_us": 12_000_000,
        "applied_us": 12_000_100,
        "adhoc": True,
    }
    summary = trace_json(files.close(EXPERIMENT, EVENTS + [adhoc]), capsys)
    segments = summary["clients"][0]["segments"]
    assert [(s["from_s"], s["until_s"]) for s in segments] == [(0.0, 10.0004), (10.0004, 12.0001), (12.0001, None)]
    assert summary["clients"][0]["segments"][-1]["count"] == 8  # 13..20 s: the event at 15 s is not known
    last = entries(summary, 12.0001)
    assert "expected_ms" not in last[("network", ("front", "db"))]
    assert summary["notes"] == [
        "an ad-hoc link change at 12.0001s is not in experiment.yaml: configured RTTs from then on are not shown"
    ]


def test_spans_of_instances_the_experiment_lacks(tmp_path, capsys):
    files = RunFiles(tmp_path)
    chain(files, 1.0, client="tester", front="web", db="sql")
    summary = trace_json(files.close(EXPERIMENT), capsys)
    assert summary["notes"] == ["instances not in the experiment (no configured RTT): sql, tester, web"]
    assert [b["median_ms"] for b in summary["breakdown"] if b["kind"] == "network"] == [20.0, 10.0]
    assert all("expected_ms" not in b for b in summary["breakdown"] if b["kind"] == "network")


def test_each_client_is_cut_where_its_own_paths_changed(tmp_path, capsys):
    files = RunFiles(tmp_path)
    for i in range(16):
        at = i * 1000.0 + 500
        chain(files, at, rtt1_ms=20.0)
        chain(files, at + 100, client="other", rtt1_ms=6.0 if at < 5000 else 22.0)
    summary = trace_json(files.close(EXPERIMENT, EVENTS), capsys)
    cuts = {c["instance"]: [(s["from_s"], s["count"]) for s in c["segments"]] for c in summary["clients"]}
    assert cuts == {"client": [(0.0, 10), (10.0004, 5), (15.0004, 1)], "other": [(0.0, 5), (5.0004, 5), (10.0004, 6)]}
    expected = {
        (b["client"], b["from_s"]): b["expected_ms"]
        for b in summary["breakdown"]
        if b["kind"] == "network" and b["from"] in ("client", "other")
    }
    assert expected == {
        ("client", 0.0): 20.0,
        ("client", 10.0004): 20.0,
        ("client", 15.0004): 20.0,
        ("other", 0.0): 6.0,
        ("other", 5.0004): 22.0,
        ("other", 10.0004): 22.0,
    }
