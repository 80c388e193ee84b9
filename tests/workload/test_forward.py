"""FORWARD: quorum (nack), branching, timeouts, retries and ERR paths."""

import socket
import time

import pytest

pytestmark = pytest.mark.timing  # timeouts and quorum waits


def closed_port():
    """A loopback port with nothing listening (bound then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def branch_args(targets, nack, slow_compute):
    """Three targets, each its own sub-chain; the last one computes for long."""
    spec = ",".join(t.addr for t in targets) + f",nack={nack},branch,timeout=20s"
    return ["-F", spec, "-C", "0", "--next-branch", "-C", "0", "--next-branch", "-C", slow_compute]


def test_quorum_two_of_three_does_not_wait_for_the_slow_one(start_node, run_client):
    gateway = start_node()
    replicas = [start_node() for _ in range(3)]
    res = run_client("--to", gateway.addr, *branch_args(replicas, 2, "500ms"), "-n", 3, timeout=60)
    assert res["ok"] == 3
    assert res.lat["max"] < 250_000
    assert gateway.stats()["forwards"] == 9


def test_quorum_three_of_three_waits_for_the_slow_one(start_node, run_client):
    gateway = start_node()
    replicas = [start_node() for _ in range(3)]
    res = run_client("--to", gateway.addr, *branch_args(replicas, 3, "500ms"), "-n", 3, timeout=60)
    assert res["ok"] == 3
    assert res.lat["min"] >= 500_000
    assert [r.stats()["requests"] for r in replicas] == [3, 3, 3]


def test_target_down_gives_err_well_within_the_timeout(start_node, run_client):
    gateway = start_node()
    res = run_client("--to", gateway.addr, "-F", f"127.0.0.1:{closed_port()},timeout=2s,retry=2", "-C", "0", "-n", 5)
    assert (res["ok"], res["err"], res["timeout"]) == (0, 5, 0)
    assert res.lat["max"] < 1_000_000
    stats = gateway.stats()
    assert stats["forwards"] == 15 and stats["fwd_retries"] == 10 and stats["fwd_errors"] == 5


def test_slow_target_times_out_after_each_retry(start_node, run_client):
    gateway, slow = start_node(), start_node()
    res = run_client(
        "--to", gateway.addr, "-F", f"{slow.addr},timeout=50ms,retry=1", "-C", "300ms", "-n", 2, timeout=60
    )
    # The gateway answers with status TIMEOUT: a reply, so its latency is measured too.
    assert (res["ok"], res["timeout"], res["err"]) == (0, 2, 0) and res.lat["count"] == 2
    stats = gateway.stats()
    assert stats["fwd_timeouts"] == 4 and stats["fwd_retries"] == 2
    assert res.lat["min"] >= 100_000 and res.lat["max"] < 300_000
    time.sleep(1.5)  # late replies from the slow node arrive and must be ignored safely
    assert gateway.stats()["malformed"] == 0


def test_quorum_impossible_returns_err_at_once(start_node, run_client):
    gateway, alive = start_node(), start_node()
    spec = f"{alive.addr},127.0.0.1:{closed_port()},127.0.0.1:{closed_port()},nack=2,timeout=5s"
    res = run_client("--to", gateway.addr, "-F", spec, "-n", 4)
    assert res["err"] == 4 and res.lat["max"] < 1_000_000


def test_udp_forward_target(start_node, run_client):
    gateway = start_node()
    target = start_node("-b", "udp://127.0.0.1:0")
    res = run_client("--to", gateway.addr, "-F", f"udp://127.0.0.1:{target.udp_port}", "-C", "100us", "-n", 50)
    assert res["ok"] == 50
    assert target.stats()["requests"] == 50
