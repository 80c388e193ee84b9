"""Bandwidth sharing in container mode, on a single-node swarm.

Two client containers send TCP (iperf3) to two servers in one container
across a 20 Mbit/s link.  Per-pair shaping alone would let each pair have
its whole path, 2 x 20 Mbit/s on a 20 Mbit/s link; with the manager's
sharing each gets half.  Throughput is what the iperf3 servers received per
second.  On Swarm the media driver runs in the bootstrapper's network
namespace, where the overlay's addresses are (container/sharing.py): the
test checks that too, and that the run reports its sharing."""

from __future__ import annotations

import json
import os
import statistics
import subprocess

import pytest
import yaml
from dockerlib import (
    ROOT,
    collapsar,
    container_pid,
    docker,
    labelled_containers,
    log,
    remove_trace_volume,
    run,
    status,
    wait_for,
    wait_listening,
)

pytestmark = pytest.mark.timing  # flow rates through a shared link

STACK = "cxshare"
TOPOLOGY = ROOT / "tests" / "docker" / "data" / "sharing.yaml"
GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500 (TCAL wire overhead)
LINK_BPS = 20e6
SECONDS = 10


def _all_shaped(experiment: str):
    snapshot = status()
    if snapshot and snapshot.get("run_id") == experiment and all(i["shaped"] for i in snapshot["instances"]):
        return snapshot
    return None


def _received_per_second(server_container: str, name: str) -> list[float]:
    report = json.loads(docker("exec", server_container, "cat", f"/tmp/{name}.json"))
    return [i["sum"]["bits_per_second"] for i in report["intervals"]]


def test_two_tcp_flows_share_the_bottleneck_on_swarm(tmp_path, images, swarm):
    out = tmp_path / "stack.yml"
    done = collapsar("generate", str(TOPOLOGY), "--swarm", "-o", str(out))
    assert (done.returncode, done.stderr) == (0, "")
    experiment = yaml.safe_load(out.read_text())["networks"]["collapsar"]["labels"]["org.collapsar.experiment"]
    docker("stack", "deploy", "-c", str(out), STACK)
    try:
        snapshot = wait_for("every instance shaped", lambda: _all_shaped(experiment), 120)
        aeron = snapshot["sharing"]["aeron"]
        assert snapshot["sharing"]["enabled"] and aeron["running"], snapshot["sharing"]
        bootstrapper = docker("ps", "-q", "--filter", f"name={STACK}_collapsar-bootstrap").split()[0]
        assert (
            os.stat(f"/proc/{aeron['driver_pid']}/ns/net").st_ino
            == os.stat(f"/proc/{container_pid(bootstrapper)}/ns/net").st_ino
        ), "the media driver is on the overlay"

        by_name = {i["name"]: i for i in snapshot["instances"]}
        server_ip = by_name["server"]["ip"]
        wait_listening(by_name["server"]["container"], (5201, 5202))
        clients = [
            subprocess.Popen(
                [
                    "docker",
                    "exec",
                    by_name[name]["container"],
                    "iperf3",
                    "-c",
                    server_ip,
                    "-p",
                    port,
                    "-t",
                    str(SECONDS),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, port in (("client", "5201"), ("client-2", "5202"))
        ]
        for client in clients:
            _, err = client.communicate(timeout=SECONDS + 60)
            assert client.returncode == 0, err
        shared = status()["sharing"]
        server = by_name["server"]["container"]
        received = {name: _received_per_second(server, name) for name in ("a", "b")}
        log(
            f"swarm sharing: received per second (Mbit/s) a {[round(r / 1e6, 2) for r in received['a']]}, "
            f"b {[round(r / 1e6, 2) for r in received['b']]}"
        )
        half = LINK_BPS / 2 * GOODPUT_SHARE
        # Seconds 2..8: both flows run (the two `docker exec` start within a
        # fraction of a second) and the first periods are behind them.
        for name, rates in received.items():
            rate = statistics.median(rates[2:8])
            assert 0.9 * half < rate < 1.1 * half, (name, rate, rates)
        together = [a + b for a, b in zip(received["a"][2:8], received["b"][2:8])]
        assert statistics.median(together) < 1.05 * LINK_BPS * GOODPUT_SHARE, together
        # The manager's own account: one sender per shaped container, nothing dropped but its own.
        metadata = shared["metadata"]
        assert metadata["sent_messages"] > 0
        assert set(metadata["dropped_messages"]) <= {"own"}, metadata
    finally:
        if run("docker", "stack", "rm", STACK, check=False).returncode != 0:
            wait_for("the stack's containers to go", lambda: not labelled_containers(experiment), 90)
            docker("stack", "rm", STACK)
        wait_for("every container of the experiment removed", lambda: not labelled_containers(experiment), 90)
        wait_for(
            "the manager container removed",
            lambda: not docker("ps", "-aq", "--filter", f"name=collapsar-manager-{experiment}").split(),
            60,
        )
        remove_trace_volume(STACK)
