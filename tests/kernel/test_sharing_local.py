"""Bandwidth sharing in a real `collapsar run` on this host's kernel (htb
only: the dumbbell has rates and no delay, so no sch_netem is needed).

Two iperf3 TCP flows cross one 20 Mbit/s bottleneck from two senders with
100 Mbit/s access links.  Without sharing each would get its collapsed path
(20 Mbit/s each, 40 on a 20 link); with sharing each gets half (equal RTT),
and the survivor takes the whole link once the other stops.  Throughput is
what the iperf3 *servers* received per second (the clients' own intervals
count socket writes, which come in buffer-sized bursts).  One run serves
every test of the module (about 20 s; one per tc tree kind, full and
active), plus one `--no-sharing` run."""

from __future__ import annotations

import json
import statistics

import pytest
from host_timing import quietest
from test_local_support import Cli, run_id_of

GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500 (TCAL wire overhead)
LINK_BPS = 20e6

TOPOLOGY = """\
experiment: {{name: dumbbell-tcp}}
services:
  ra: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/ra.json"]}}
  rb: {{command: [iperf3, -s, -1, -i, "1", -J, --logfile, "{out}/rb.json"]}}
  a: {{command: [sh, -c, "sleep 0.5; iperf3 -c ra -t {long}"]}}
  b: {{command: [sh, -c, "sleep 0.5; iperf3 -c rb -t {short}"]}}
bridges: [left, right]
links:
  - {{from: a, to: left, bandwidth: 100Mbps}}
  - {{from: b, to: left, bandwidth: 100Mbps}}
  - {{from: right, to: ra, bandwidth: 100Mbps}}
  - {{from: right, to: rb, bandwidth: 100Mbps}}
  - {{from: left, to: right, bandwidth: 20Mbps}}
"""


def received_per_second(path) -> list[float]:
    return [i["sum"]["bits_per_second"] for i in json.loads(path.read_text())["intervals"]]


def run_dumbbell(tmp, *flags, long=14, short=7):
    out = tmp / "out"
    out.mkdir(parents=True)
    (tmp / "db.yaml").write_text(TOPOLOGY.format(out=out, long=long, short=short))
    cli = Cli(
        "run",
        str(tmp / "db.yaml"),
        "--subnet",
        "10.79.0.0/24",
        "--run-dir",
        str(tmp / "runs"),
        "--grace",
        "1s",
        "--status-port",
        "-1",
        *flags,
    )
    try:
        code, lines, stderr = cli.finish(120)
    finally:
        cli.kill()
    assert code == 0, (lines, stderr)
    return {
        "lines": lines,
        "a": received_per_second(out / "ra.json"),
        "b": received_per_second(out / "rb.json"),
        "dir": tmp / "runs" / run_id_of(lines),
    }


@pytest.fixture(scope="module", params=["full", "active"])
def shared(request, tmp_path_factory):
    """One run per tree kind: the active tree (classes shared by idle
    destinations, tcal/active.py) must give the same shares as the full one."""
    tree = request.param
    run, host = quietest(lambda: run_dumbbell(tmp_path_factory.mktemp(f"sharing-{tree}"), "--tree", tree))
    return {**run, "host": str(host), "tree": tree}


def test_two_flows_each_get_half_the_bottleneck(shared):
    half = LINK_BPS / 2 * GOODPUT_SHARE
    # Seconds 2..6 of b's 7: both flows run and sharing has converged.
    for name in ("a", "b"):
        rate = statistics.median(shared[name][2:6])
        assert 0.9 * half < rate < 1.1 * half, (name, rate, shared[name], shared["host"])
    together = [a + b for a, b in zip(shared["a"][2:6], shared["b"][2:6])]
    assert statistics.median(together) < 1.05 * LINK_BPS * GOODPUT_SHARE, (together, shared["host"])


def test_the_survivor_takes_the_whole_link(shared):
    whole = LINK_BPS * GOODPUT_SHARE
    # b stops at ~7.5 s; a's seconds 9..13 run alone.
    rate = statistics.median(shared["a"][9:13])
    assert 0.9 * whole < rate < 1.05 * whole, (rate, shared["a"], shared["host"])


def test_the_run_reports_its_sharing_and_metadata(shared):
    summary = next(line for line in shared["lines"] if line.startswith("sharing: "))
    assert "driver restarts 0" in summary and "dropped 0" in summary, summary
    trees = [line for line in shared["lines"] if line.startswith("tc trees: ")]
    if shared["tree"] == "full":
        assert trees == []
    else:  # a->ra, b->rb and their ACKs back: four pairs carried traffic
        assert trees[-1] == "tc trees: active; 4 destinations got a class of their own", trees
    log = (shared["dir"] / "aeron-driver.log").read_text()
    assert "Shutting down driver" in log


def test_without_sharing_each_flow_gets_its_whole_path(tmp_path):
    # The control: per-pair shaping lets 2 x 20 Mbit/s cross a 20 Mbit/s link.
    dirs = iter(tmp_path / f"attempt{i}" for i in range(3))
    alone, host = quietest(lambda: run_dumbbell(next(dirs), "--no-sharing", long=5, short=5))
    for name in ("a", "b"):
        rate = statistics.median(alone[name][1:4])
        assert rate > 0.9 * LINK_BPS * GOODPUT_SHARE, (name, rate, str(host))
    assert not any(line.startswith("sharing: ") for line in alone["lines"])
