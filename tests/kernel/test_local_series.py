"""A local run's time series (series/*.csv) and its live probe
(--probe-every), on this host's kernel: bandwidth only, so every configured
RTT is 0 and the probe's figures are about reachability over time."""

from __future__ import annotations

import csv
import os
import time
import urllib.request

import pytest
from test_local_support import Cli, run_id_of

TOPOLOGY = """\
experiment: {name: series}
services:
  a: {command: [sleep, '60']}
  b: {command: [sleep, '60']}
  c: {command: [sleep, '60'], replicas: 0}
bridges: [sw]
links:
  - {from: a, to: sw, bandwidth: 100Mbps}
  - {from: b, to: sw, bandwidth: 100Mbps}
  - {from: c, to: sw, bandwidth: 100Mbps}
events:
  - {at: 1500ms, service: c, action: join}
  - {at: 2500ms, service: b, action: disconnect}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("series")
    (tmp / "series.yaml").write_text(TOPOLOGY)
    argv = ["run", str(tmp / "series.yaml"), "--duration", "4s", "--probe-every", "100ms"]
    cli = Cli(*argv, "--run-dir", str(tmp / "runs"))
    try:
        cli.wait_line("probing 6 pairs", 60)  # at t=0
        status = next(line for line in cli.lines if line.startswith("status: "))
        time.sleep(3.2)  # past b's disconnect at 2.5 s
        with urllib.request.urlopen(status.split()[1].replace("/status", "/metrics"), timeout=5) as reply:
            metrics = reply.read().decode()
        code, lines, stderr = cli.finish(90)
    finally:
        cli.kill()
    run_dir = tmp / "runs" / run_id_of(lines)
    tables = {}
    for name in ("rtt", "events", "flows", "links", "workload"):
        with open(run_dir / "series" / f"{name}.csv", newline="") as handle:
            tables[name] = list(csv.DictReader(handle))
    return {"code": code, "lines": lines, "stderr": stderr, "tables": tables, "metrics": metrics}


def test_the_run_says_what_it_probes_and_leaves_no_ping_behind(run):
    assert run["code"] == 0, run["stderr"]
    assert "probing 6 pairs every 100 ms (series/rtt.csv)" in run["lines"]
    assert not _our_pings()


def _our_pings() -> list[int]:
    """Processes running the live probe's ping (`ping -n -D -i`)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"ping\0-n\0-D\0-i\0" in handle.read():
                    found.append(int(pid))
        except OSError:  # gone meanwhile
            continue
    return found


def test_rtt_series_follows_the_join_and_the_disconnect(run):
    rows = {(int(r["t_s"]), r["src"], r["dst"]): r for r in run["tables"]["rtt"]}
    assert {second for second, _, _ in rows} == {1, 2, 3, 4}  # whole seconds of a 4 s run
    # each echo request counts in the second it left: 10 a second, give or
    # take the one ping's timer moves across a second's edge
    assert len(rows) == 4 * 6 and all(9 <= int(r["sent"]) <= 11 for r in rows.values())
    for src, dst in {(s, d) for _, s, d in rows}:
        assert 39 <= sum(int(rows[(t, src, dst)]["sent"]) for t in range(1, 5)) <= 41
    got = lambda second, src, dst: int(rows[(second, src, dst)]["received"])  # noqa: E731
    # a and b answer each other until b is disconnected at 2.5 s
    assert got(1, "a", "b") >= 9 and got(2, "b", "a") >= 9 and got(4, "a", "b") == got(4, "b", "a") == 0
    assert 3 <= got(3, "a", "b") <= 6
    # c has no path before it joins at 1.5 s, and one after
    assert got(1, "a", "c") == got(1, "c", "a") == 0 and got(4, "a", "c") >= 9 and got(4, "c", "a") >= 9
    # the configured RTT: 0 ms (bandwidth only) where a path exists both ways, empty where it is cut
    assert rows[(1, "a", "b")]["configured_rtt_ms"] == "0" and rows[(1, "a", "c")]["configured_rtt_ms"] == ""
    assert rows[(4, "a", "b")]["configured_rtt_ms"] == "" and rows[(4, "c", "a")]["configured_rtt_ms"] == "0"
    assert float(rows[(1, "a", "b")]["rtt_median_ms"]) < 1.0  # veth, no delay


def test_events_series_lists_each_step(run):
    events = run["tables"]["events"]
    assert [(e["index"], e["label"]) for e in events] == [("0", "c join [c]"), ("1", "b disconnect [b]")]
    assert [float(e["scheduled_s"]) for e in events] == [1.5, 2.5]
    assert all(e["error"] == "" and 0 <= int(e["lateness_us"]) < 100_000 for e in events)


def test_the_other_series_exist_with_their_headers(run):
    # the probe's echoes are the only traffic: each row is a pair of the run,
    # and c's before it joins are offered to a cut path (the counters see them)
    flows = run["tables"]["flows"]
    assert {(r["src"], r["dst"]) for r in flows} <= {(s, d) for s in "abc" for d in "abc" if s != d}
    assert all(r["cut"] == "1" for r in flows if r["src"] == "c" and float(r["t_s"]) < 1.5)
    assert run["tables"]["workload"] == []  # no wl-client in this run
    # the echoes load each link both ways: the series names them as /topology does
    links = run["tables"]["links"]
    assert {(r["link"], r["a"], r["b"]) for r in links} == {("0", "a", "sw"), ("1", "b", "sw"), ("2", "c", "sw")}
    assert {r["direction"] for r in links} == {"up", "down"}
    assert all(r["capacity_bps"] == "100000000" and 0 < int(r["load_bps"]) < 100_000 for r in links)


def test_metrics_show_the_probe_while_the_run_goes(run):
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in run["metrics"].splitlines()
        if line.startswith("collapsar_probe_")
    }
    ab, ac = '{src="a",dst="b"}', '{src="a",dst="c"}'
    # about 32 echo requests by 3.2 s at 100 ms, all answered until b's disconnect at 2.5 s
    assert 20 <= samples[f"collapsar_probe_requests_total{ab}"] <= 33
    assert 20 <= samples[f"collapsar_probe_replies_total{ab}"] <= 26
    assert samples[f"collapsar_probe_rtt_seconds{ab}"] < 0.001  # veth, no delay
    assert f"collapsar_probe_configured_rtt_seconds{ab}" not in samples  # cut now
    assert samples[f"collapsar_probe_configured_rtt_seconds{ac}"] == 0  # c joined at 1.5 s
    assert 8 <= samples[f"collapsar_probe_replies_total{ac}"] <= 18
