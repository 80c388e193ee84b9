"""The examples with delay, jitter or loss, each run in the stock-kernel VM
(which has sch_netem) as a user runs it, `collapsar run topologies/NAME
--duration D`, and asserted on what it is there to show.  The examples
without netem run on the host (tests/kernel/test_examples_run.py);
tests/unit/test_topologies.py checks that the two lists hold every example.

Runs are kept to 12-22 s of emulated time, one after the other.  Latencies
are bounded from below by the collapsed paths (netem never releases a packet
early) and loosely from above: this emulated machine adds 0.7-1.8 ms per
shaped direction, more when it is busy (tests/vm/test_netem.py), and under
load the emulated CPUs queue requests for tens of ms.  Request times come
from each client's records (RUNDIR/workload/CLIENT.requests.csv) placed on
the run's timeline by the client's actual start, and are compared with the
times the steps were actually in force (both can be late by a second or
more in the VM).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from examples_support import TOPOLOGIES, VM_EXAMPLES, median_latency_ms, ok_ratio, run_example, window

from collapsar.model import ServiceEvent
from collapsar.parser import parse_file

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "vm" / "examples"
MBPS = 1_000_000


def test_this_module_runs_the_vm_examples():
    assert set(VM_EXAMPLES) == {"churn.yaml", "demo.yaml", "dumbbell.yaml", "flaky.yaml", "geo.yaml", "three-tier.yaml"}


def example(name: str, tmp_path: Path, duration: str):
    run = run_example(name, tmp_path, duration, timeout_s=600)
    keep = ARTIFACTS / name.removesuffix(".yaml")
    shutil.rmtree(keep, ignore_errors=True)
    # Spans are large and not asserted here: keep what the assertions read.
    shutil.copytree(run.dir, keep, ignore=shutil.ignore_patterns("*.spans.jsonl", "aeron*"))
    assert run.code == 0, run.describe()
    return run


def targets(name: str, action: str) -> set[str]:
    """The instances a service event of the example acts on (resolved by its seed)."""
    return {
        target
        for event in parse_file(TOPOLOGIES / name).events
        if isinstance(event, ServiceEvent) and event.action == action
        for target in event.targets
    }


def applied(run) -> list[str]:
    """The labels of the timeline steps the run applied (events at one time are one step)."""
    events = run.events()
    assert all(event["error"] is None and event["applied_us"] is not None for event in events), events
    return [event["label"] for event in events]


def test_demo(tmp_path):
    run = example("demo.yaml", tmp_path, "12s")
    assert set(run.instances()) == {"server", "client", "client-2"}
    assert "events: 1 applied, 2 not reached" in run.stdout
    assert applied(run) == ["link s1 -- s2 set"]
    flows = run.flows()
    # The 10 s event cuts the upload from 20 to 5 Mbit/s; both clients upload meanwhile.
    up = flows[("client", "server")]
    assert [s["configured_bps"] for s in up["segments"]] == [20 * MBPS, 5 * MBPS]
    assert up["bytes"] > 2_000_000 and flows[("client-2", "server")]["bytes"] > 2_000_000


def test_dumbbell(tmp_path):
    run = example("dumbbell.yaml", tmp_path, "16s")
    (step,) = run.events()
    assert step["label"] == "link left -- right set" and step["error"] is None
    flows = run.flows()
    first, sent = {}, 0
    for x in "abc":
        flow = flows[(f"sender-{x}", f"receiver-{x}")]
        before, after = flow["segments"]
        assert (before["configured_bps"], after["configured_bps"]) == (10 * MBPS, 20 * MBPS)
        first[x] = before["median_rate_bps"]
        sent += flow["bytes"]
    # The flow with the shortest RTT takes the largest share of the bottleneck.
    assert first["a"] >= first["b"] >= first["c"], first
    # Together they fit the bottleneck: 10 Mbit/s until 8 s, 20 after, plus
    # the htb burst; and they fill a good part of it.
    step_s = step["applied_us"] / 1e6
    allowed = (10 * MBPS * step_s + 20 * MBPS * (16 - step_s)) / 8
    assert 0.5 * allowed <= sent <= 1.05 * allowed, (sent, allowed)


def test_churn(tmp_path):
    run = example("churn.yaml", tmp_path, "20s")
    assert len(applied(run)) == 9  # a step every 2 s (the load and two web replicas join together)
    status = {name: i["status"] for name, i in run.instances().items()}
    crashed, left = targets("churn.yaml", "crash"), targets("churn.yaml", "leave")
    assert len(crashed) == 2 and len(left) == 1
    assert {name for name, s in status.items() if s == "crashed"} == crashed
    assert {name for name, s in status.items() if s == "stopped"} == left
    assert {name for name, s in status.items() if s == "up"} == (
        {"lb", "load", "cache", "cache-2", "web", "web-2", "web-3", "web-4", "web-5", "web-6"} - crashed - left
    )
    records, start = run.requests("load"), run.client_start_s("load")
    cut_s = run.applied_s()[-1]  # the edge bridge leaves
    # Served through every join, crash and leave (the first of eight replies
    # is enough), until the edge bridge leaves and cuts the load off.
    served = window(records, start, cut_s - 0.5, start)
    assert len(served) >= 60 and ok_ratio(served) >= 0.97
    assert ok_ratio(window(records, cut_s + 0.1, 20, start)) == 0
    # The load is 11.5 ms from lb, lb 0.7-1 ms from a replica: a reply takes
    # two of the first and two of the second, and a 2 ms render or a read.
    # A busy VM queues the eight forwards of a request (and their spans) for
    # up to about 60 ms more.
    assert 25 <= median_latency_ms(served) <= 100


def test_flaky(tmp_path):
    run = example("flaky.yaml", tmp_path, "20s")
    # the client's join, four flap changes, the partition and its heal, the loss
    steps = run.applied_s()
    assert len(steps) == 8
    join, down, up, down_again, up_again, cut, heal, lossy = steps
    records, start = run.requests("client"), run.client_start_s("client")
    # A write sent while kv-c cannot reach kv-a and kv-b times out after 500 ms.
    assert ok_ratio(window(records, start, down - 0.1, start)) >= 0.9  # all replicas reachable
    assert ok_ratio(window(records, down + 0.1, up - 0.5, start)) <= 0.05  # rack2's uplink is down
    assert ok_ratio(window(records, cut + 0.1, heal - 0.5, start)) <= 0.05  # kv-c is in the minority
    # Healed (TCP retransmits within seconds), 2% loss on the spine.
    assert ok_ratio(window(records, heal + 4, 19, start)) >= 0.8
    summary = run.summary("client")
    assert summary["timeout"] >= 30 and summary["ok"] >= 60, summary


def test_geo(tmp_path):
    run = example("geo.yaml", tmp_path, "22s")
    join, congested, cleared = run.applied_s()
    assert {n for n, i in run.instances().items() if i["status"] == "up"} >= {"users", "users-2", "users-3"}
    for user in ("users", "users-2", "users-3"):
        start = run.client_start_s(user)
        assert ok_ratio(window(run.requests(user), start, 20.5, start)) >= 0.99, user
    records, start = run.requests("users"), run.client_start_s("users")
    via_frankfurt = median_latency_ms(window(records, start + 0.5, congested - 0.5, start))
    direct = median_latency_ms(window(records, congested + 0.5, cleared - 0.5, start))
    back = median_latency_ms(window(records, cleared + 0.5, 20.5, start))
    # A write waits for the round trip from store-lis to store-tyo: 2 x 136 ms
    # through Frankfurt, 2 x 161 ms direct while Frankfurt-Tokyo is congested,
    # and 11 ms between the users and store-lis.
    assert 270 <= via_frankfurt <= 345, via_frankfurt
    assert direct - via_frankfurt >= 30, (via_frankfurt, direct)
    assert abs(back - via_frankfurt) <= 25, (via_frankfurt, back)


def test_three_tier(tmp_path):
    run = example("three-tier.yaml", tmp_path, "20s")
    (crashed,) = targets("three-tier.yaml", "crash")
    assert applied(run) == [
        "users-eu join [users-eu]; users-us join [users-us]; users-ap join [users-ap]",
        f"db crash [{crashed}]",
        "link virginia -- frankfurt set",
    ]
    join, crash, degraded = run.applied_s()
    assert run.instances()[crashed]["status"] == "crashed"
    records = {user: run.requests(user) for user in ("users-eu", "users-us", "users-ap")}
    starts = {user: run.client_start_s(user) for user in records}
    for user, mine in records.items():
        # Every write reached its quorum, also after a storage replica crashed
        # (until the run's end stops the nodes under the last requests).
        sent = window(mine, starts[user], 18.5, starts[user])
        assert len(sent) >= 120 and ok_ratio(sent) == 1.0, user
        assert ok_ratio(window(mine, crash, 18.5, starts[user])) == 1.0, user

    # Round trips to Frankfurt: 2 x 26.1 ms from Lisbon, 2 x 86.1 ms from
    # Singapore, 2 x 51.1 ms from Virginia until the link degrades, then
    # 2 x 96.1 ms; plus 1.5 ms of work and the quorum write in the data centre.
    def median(user: str, start_s: float, end_s: float) -> float:
        return median_latency_ms(window(records[user], start_s, end_s, starts[user]))

    eu, ap = median("users-eu", 0, 18.5), median("users-ap", 0, 18.5)
    us_before, us_after = median("users-us", 0, degraded - 0.3), median("users-us", degraded + 0.5, 18.5)
    # The emulated CPUs add 10-35 ms here (CPU time of the nodes' work and spans).
    for median, configured in ((eu, 54), (us_before, 104), (ap, 174), (us_after, 194)):
        assert configured <= median <= 1.4 * configured + 15, (eu, us_before, ap, us_after)
    assert us_after - us_before >= 60, (us_before, us_after)
