"""One real local run on this host's kernel (bandwidth only: no sch_netem
here), asserted from several sides: names resolve in every namespace, htb
holds each destination's rate, events fire on time, and teardown leaves
nothing behind.  The run happens once per module (about 10 s)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from host_timing import quietest
from test_local_support import Cli, host_snapshot, pid_alive, read_json, run_id_of

from collapsar.manager.local import firewall
from collapsar.manager.play.scheduler import percentile
from collapsar.tcal.plan import default_queue_pkts

GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500 (TCAL wire overhead)

# Not the host's default, so the run's setting shows in every instance's TCP.
HOST_CC = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
CHOSEN_CC = "cubic" if HOST_CC == "reno" else "reno"

TOPOLOGY = """\
experiment: {{name: local-basic, congestion-control: {cc}}}
services:
  fast: {{command: [iperf3, -s, -1, -p, "5201"]}}
  slow: {{command: [iperf3, -s, -1, -p, "5202"]}}
  client:
    command: [sh, -c, "sleep 0.5; iperf3 -c fast -p 5201 -t 4 -J --logfile $OUT/fast.json &
              iperf3 -c slow -p 5202 -t 4 -J --logfile $OUT/slow.json; wait"]
    env: {{OUT: "{out}"}}
  pinger: {{command: [sh, -c, "ping -c 2 -i 0.2 -W 2 fast && getent hosts slow client"]}}
  idle: {{command: [sleep, "60"]}}
  idle2: {{command: [sleep, "60"]}}
  late: {{command: [sh, -c, "ping -c 1 -W 2 fast && getent hosts late && tc qdisc show dev eth0"], replicas: 0}}
bridges: [sw]
links:
  - {{from: client, to: sw, bandwidth: 100Mbps}}
  - {{from: pinger, to: sw, bandwidth: 100Mbps}}
  - {{from: idle, to: sw, bandwidth: 100Mbps}}
  - {{from: idle2, to: sw, bandwidth: 100Mbps}}
  - {{from: late, to: sw, bandwidth: 100Mbps}}
  - {{from: sw, to: fast, bandwidth: 40Mbps}}
  - {{from: sw, to: slow, bandwidth: 10Mbps}}
events:
  - {{at: 1s, service: idle, action: crash}}
  - {{at: 1s, service: late, action: join, amount: 1}}
  - {{at: 1500ms, service: pinger, action: disconnect}}
  - {{at: 2s, service: pinger, action: reconnect}}
  - {{at: 2500ms, link: [pinger, sw], set: {{bandwidth: 50Mbps}}}}
  - {{at: 3s, service: idle2, action: leave}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    before = host_snapshot()

    def one_run():
        tmp = tmp_path_factory.mktemp("local")
        out = tmp / "out"
        out.mkdir()
        (tmp / "basic.yaml").write_text(TOPOLOGY.format(out=out, cc=CHOSEN_CC))
        cli = Cli(
            "run",
            str(tmp / "basic.yaml"),
            "--duration",
            "20s",
            "--subnet",
            "10.78.0.0/24",
            "--run-dir",
            str(tmp / "runs"),
            "--grace",
            "1s",
        )
        try:
            code, lines, stderr = cli.finish(90)
        finally:
            cli.kill()
        run_dir = tmp / "runs" / run_id_of(lines)
        return {
            "code": code,
            "lines": lines,
            "stderr": stderr,
            "dir": run_dir,
            "out": out,
            "plan": read_json(run_dir / "plan.json"),
        }

    # Timing and rates are asserted on the run the host was quietest for (tests/host_timing.py).
    result, host = quietest(one_run)
    return {**result, "host": host, "before": before, "after": host_snapshot()}


def test_run_ends_when_every_command_has_exited(run):
    assert run["code"] == 0, run["stderr"]
    assert "stopping: every command has exited" in run["lines"]
    assert any(line.startswith("all 6 instances up in ") for line in run["lines"])  # late joins at 1 s
    final = {i["name"]: (i["status"], i["exit_code"]) for i in read_json(run["dir"] / "instances.json")}
    assert final == {
        "fast": ("exited(0)", 0),
        "slow": ("exited(0)", 0),
        "client": ("exited(0)", 0),
        "pinger": ("exited(0)", 0),
        "idle": ("crashed", -9),
        "idle2": ("stopped", -15),
        "late": ("exited(0)", 0),
    }


def test_addresses_come_from_the_subnet_flag(run):
    ips = {i["name"]: i["ip"] for i in run["plan"]["instances"]}
    assert ips == {
        "fast": "10.78.0.2",
        "slow": "10.78.0.3",
        "client": "10.78.0.4",
        "pinger": "10.78.0.5",
        "idle": "10.78.0.6",
        "idle2": "10.78.0.7",
        "late": "10.78.0.8",
    }
    assert run["plan"]["netem"] is False


def test_instances_reach_each_other_by_name(run):
    out = (run["dir"] / "logs" / "pinger.out").read_text()
    assert "PING fast (10.78.0.2)" in out
    assert "2 packets transmitted, 2 received, 0% packet loss" in out
    assert "10.78.0.3       slow" in out and "10.78.0.4       client" in out


def test_an_instance_that_joins_later_is_reachable(run):
    out = (run["dir"] / "logs" / "late.out").read_text()
    assert "1 packets transmitted, 1 received" in out and "10.78.0.8       late" in out


def test_an_instance_that_joins_later_gets_its_paths_queues(run):
    """Its tree is made at t=0 with classes only to be cut (it has no path
    yet); each class's queue is sized for the path it gets when it joins
    (20 ms at the path's rate: no delay here), not for the unlimited
    placeholder (1000 packets, before the fix)."""
    out = (run["dir"] / "logs" / "late.out").read_text()
    limits = sorted(int(line.split("limit ")[1].rstrip("p")) for line in out.splitlines() if " pfifo " in line)
    to_client, to_fast, to_slow = (default_queue_pkts(rate, 0) for rate in (100_000_000, 40_000_000, 10_000_000))
    # The blackhole's 0; slow, fast; client, pinger and idle2 across their
    # 100 Mbit/s links; idle crashed as late joined: its class never got a
    # path and keeps the placeholder's 1000, cut.
    assert limits == sorted([0, to_slow, to_fast, to_client, to_client, to_client, 1000]), out
    assert (to_slow, to_fast, to_client) == (17, 67, 166)


def goodput_bps(path: Path) -> float:
    return json.loads(path.read_text())["end"]["sum_received"]["bits_per_second"]


def test_htb_holds_each_destinations_rate(run):
    fast, slow = goodput_bps(run["out"] / "fast.json"), goodput_bps(run["out"] / "slow.json")
    # Both flows leave the client's one interface, so each destination's own
    # class holds its rate.  The ceiling is tight (a shaper must not let more
    # through); the floor is looser because a loaded 2-core host can starve
    # iperf3 itself, and below ~10 Mbit/s a 4 s test under-reports (its
    # end-of-test message waits behind the class's queue).  The TCAL's own
    # tests pin the precise figure; this checks that local mode installed
    # the right class for each destination (swapped classes miss by 4x).
    for measured, rate_bps in ((fast, 40e6), (slow, 10e6)):
        expected = rate_bps * GOODPUT_SHARE
        assert 0.80 * expected < measured < 1.03 * expected, (measured, expected)


def test_every_instance_uses_the_experiments_congestion_control(run):
    # iperf3 reports what the kernel gave its connection, at both ends (client and server instances).
    for name in ("fast.json", "slow.json"):
        end = json.loads((run["out"] / name).read_text())["end"]
        assert (end["sender_tcp_congestion"], end["receiver_tcp_congestion"]) == (CHOSEN_CC, CHOSEN_CC), HOST_CC


def test_commands_start_at_t0_once_sharing_and_counters_are_up(run):
    """t=0 is when the commands start, and with sharing (the default) the
    counters are attached before: flows are shared from their first byte."""
    lines = run["lines"]
    counters = next(i for i, line in enumerate(lines) if line.startswith("counters attached on "))
    up = next(i for i, line in enumerate(lines) if line.startswith("all 6 instances up in "))
    assert counters < up, lines
    t0 = float((run["dir"] / "t0").read_text())
    journal = [json.loads(line) for line in (run["dir"] / "journal.jsonl").read_text().splitlines()]
    started = [r["t"] for r in journal if r["kind"] == "process" and r["t"] < t0]
    assert len(started) == 6  # every instance of t=0 (`late` joins at 1 s)
    assert t0 - min(started) < 0.5, (t0, started)


def test_events_fire_on_time_in_order(run):
    log = read_json(run["dir"] / "events.json")
    assert [(e["scheduled_us"], e["label"]) for e in log] == [
        (1_000_000, "idle crash [idle]; late join [late]"),
        (1_500_000, "pinger disconnect [pinger]"),
        (2_000_000, "pinger reconnect [pinger]"),
        (2_500_000, "link pinger -- sw set"),
        (3_000_000, "idle2 leave [idle2]"),
    ]
    assert all(e["error"] is None for e in log)
    late = [e["lateness_us"] for e in log]
    # Issue 3's bound, on top of how late this host woke a thread of the same
    # priority during the run (tests/host_timing.py: 0.1 ms on a quiet host,
    # tens of ms when the hypervisor is oversubscribed).
    host = run["host"]
    print(f"event lateness {late} us; {host}")
    assert min(late) >= 0 and percentile(late, 0.99) < 5_000 + host.max_us, (late, str(host), log)
    # Each step was prepared before its time and fired at it (tcal/prepared.py).
    assert all(
        e["prepared_us"] < e["scheduled_us"] + host.max_us and e["scheduled_us"] <= e["started_us"] <= e["applied_us"]
        for e in log
    ), (str(host), log)


def test_teardown_leaves_nothing(run):
    plan = run["plan"]
    made_ns = {i["netns"] for i in plan["instances"]}
    made_links = {i["veth"] for i in plan["instances"]} | {plan["bridge"]}
    assert len(made_ns) == 7 and len(made_links) == 8
    # Other test sessions may create their own namespaces meanwhile: compare
    # what is new with what this run made (and anything carrying its id).
    run_id = plan["run_id"]
    for kind, made in (("netns", made_ns), ("links", made_links), ("etc_netns", made_ns)):
        new = run["after"][kind] - run["before"][kind]
        assert not new & made, (kind, new & made)
        assert not {name for name in new if run_id in name}, (kind, new)
    journal = [json.loads(line) for line in (run["dir"] / "journal.jsonl").read_text().splitlines()]
    pids = [r["pid"] for r in journal if r["kind"] == "process"]
    assert len(pids) == 7 and not any(pid_alive(pid) for pid in pids)
    assert journal[-1]["kind"] == "finished"
    # Where bridged frames pass through iptables (br_netfilter, e.g. with
    # Docker installed) the run let its bridge through with one tagged rule,
    # and took it away again.
    fw = [r for r in journal if r["kind"] == "fw_accept"]
    assert len(fw) == (1 if firewall.bridged_traffic_filtered() else 0)
    assert not {rule for rule in run["after"]["forward_rules"] if run_id in rule}
    index = Path(os.environ.get("COLLAPSAR_STATE_DIR", "/run/collapsar")) / "index" / run_id
    assert not index.exists()
