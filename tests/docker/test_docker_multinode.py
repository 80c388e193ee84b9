"""Container mode across two Swarm nodes on this one machine.

Node 1 is the tier's dockerd; node 2 a second dockerd in namespaces of its
own (node2.py), joined over a veth pair, so the experiment's overlay runs
VXLAN between two engines as on two hosts.  The stack is the sharing
topology (two clients, one server behind a 20 Mbit/s link) with the server
pinned to node 1 and at most one client per node, so each node has one
sender: only the managers' metadata over Aeron UDP between the nodes can
make the two flows share the link.  What a single-node run cannot show:

1. each instance is shaped by the manager of the node it runs on, and
   each manager knows the other node's instances by their overlay address
   (from the overlay's DNS);
2. the per-destination htb classes hold the collapsed rates on both nodes,
   towards local and remote destinations alike;
3. two TCP flows from senders on different nodes get half the link each,
   and each manager heard the other node;
4. `docker stack rm` leaves nothing on either node.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess

import pytest
import yaml
from dockerlib import (
    ROOT,
    classes_by_destination,
    collapsar,
    collapsar_processes,
    docker,
    htb_rates,
    ifname_of,
    log,
    mtu_of,
    netns_inodes,
    remove_trace_volume,
    run,
    status,
    wait_for,
    wait_listening,
)
from node2 import HOST_IP, NODE_IP, Node2

from collapsar.deploy.naming import IMAGE_MANAGER, IMAGE_NODE
from collapsar.parser import parse_file
from collapsar.tcal.plan import htb_params
from collapsar.timeline import build_timeline

STACK = "cxmulti"
TOPOLOGY = ROOT / "tests" / "docker" / "data" / "sharing.yaml"
NODE_LABEL = "org.collapsar.test-node"
GOODPUT_SHARE = 1448 / 1538  # TCP goodput of an Ethernet link at MTU 1500 (TCAL wire overhead)
LINK_BPS = 20e6
SECONDS = 10


@pytest.fixture(scope="module")
def two_nodes(engine, images):
    """A two-node swarm: node 1 (this engine) the manager, node 2 a worker;
    the images copied to node 2, the nodes labelled 1 and 2."""
    state = docker("info", "-f", "{{.Swarm.LocalNodeState}}").strip()
    if state != "inactive":
        pytest.fail(
            f"this engine is already in a swarm ({state}); the multi-node test makes its own: "
            f"`docker swarm leave --force` first"
        )
    node2 = Node2()
    members = []  # the engines in the swarm, each a docker CLI
    try:
        node2.start()
        docker("swarm", "init", "--advertise-addr", HOST_IP, "--listen-addr", f"{HOST_IP}:2377")
        members.append(docker)
        token = docker("swarm", "join-token", "-q", "worker").strip()
        node2.cli(
            "swarm",
            "join",
            "--token",
            token,
            "--advertise-addr",
            NODE_IP,
            "--listen-addr",
            f"{NODE_IP}:2377",
            f"{HOST_IP}:2377",
        )
        members.append(node2.cli)
        node2.load_images(IMAGE_MANAGER, IMAGE_NODE)
        for number, member in enumerate(members, start=1):
            node_id = member("info", "-f", "{{.Swarm.NodeID}}").strip()
            docker("node", "update", "--label-add", f"{NODE_LABEL}={number}", node_id)
        wait_for(
            "both nodes ready",
            lambda: docker("node", "ls", "--format", "{{.Status}}").split() == ["Ready", "Ready"],
            30,
        )
        yield node2
    finally:
        for member in reversed(members):  # the worker first: the manager is the swarm's last
            try:
                member("swarm", "leave", "--force")
            except AssertionError as error:
                log(f"warning: swarm leave: {error}")
        node2.stop()


def _placed_stack(path) -> dict:
    """The generated stack with the server on node 1 and one client per node."""
    stack = yaml.safe_load(path.read_text())
    services = stack["services"]
    services["server"]["deploy"]["placement"] = {"constraints": [f"node.labels.{NODE_LABEL}==1"]}
    services["client"]["deploy"]["placement"] = {"max_replicas_per_node": 1}
    path.write_text(yaml.safe_dump(stack))
    return stack


def _both_up(experiment: str, node2: Node2):
    """Both managers' snapshots once, between them, every instance is shaped
    and each knows every address."""
    snapshots = {1: status(), 2: node2.status()}
    if not all(s and s.get("run_id") == experiment for s in snapshots.values()):
        return None
    if not all(i["ip"] for s in snapshots.values() for i in s["instances"]):
        return None
    shaped = [i["name"] for s in snapshots.values() for i in s["instances"] if i["shaped"]]
    return snapshots if sorted(shaped) == sorted(i["name"] for i in snapshots[1]["instances"]) else None


def _containers(engine_docker, experiment: str, role: str) -> dict[str, dict]:
    """container id (12) -> inspection, of this experiment's `role` on one node."""
    ids = engine_docker(
        "ps",
        "-q",
        "--filter",
        f"label=org.collapsar.experiment={experiment}",
        "--filter",
        f"label=org.collapsar.role={role}",
    ).split()
    return {c["Id"][:12]: c for c in json.loads(engine_docker("inspect", *ids))} if ids else {}


def check_placement(snapshots: dict, engines: dict, experiment: str) -> dict[str, int]:
    """Every instance shaped once, by its own node's manager; every manager
    has the overlay address of every instance.  Returns instance -> node."""
    node_of, overlay_ip = {}, {}
    for node, engine_docker in engines.items():
        for cid, inspection in _containers(engine_docker, experiment, "instance").items():
            node_of[cid] = node
            overlay_ip[cid] = inspection["NetworkSettings"]["Networks"][f"{STACK}_collapsar"]["IPAddress"]
    where = {}
    for node, snapshot in snapshots.items():
        for inst in snapshot["instances"]:
            if inst["shaped"]:
                assert inst["name"] not in where, f"{inst['name']} shaped by both managers"
                assert node_of.get(inst["container"]) == node, (inst, node_of)
                where[inst["name"]] = node
    ip_of = {}
    for snapshot in snapshots.values():  # the local addresses come from the engine
        ip_of.update({i["name"]: overlay_ip[i["container"]] for i in snapshot["instances"] if i["shaped"]})
    for node, snapshot in snapshots.items():  # the remote ones from the overlay's DNS
        assert {i["name"]: i["ip"] for i in snapshot["instances"]} == ip_of, f"node {node}'s addresses"
        for inst in snapshot["instances"]:
            if not inst["shaped"]:
                assert (inst["pid"], inst["container"], inst["status"]) == (None, None, "up"), inst
    # The stack pins the server to node 1 and puts one client on each node.
    assert where["server"] == 1 and sorted([where["client"], where["client-2"]]) == [1, 2], where
    return where


def check_rates(snapshots: dict, ip_of: dict[str, str]) -> None:
    """One htb class per destination, at the collapsed rate, in the
    containers of both nodes (the remote destinations too)."""
    state = build_timeline(parse_file(TOPOLOGY)).steps[0].state
    for snapshot in snapshots.values():
        for inst in (i for i in snapshot["instances"] if i["shaped"]):
            src, pid = inst["name"], inst["pid"]
            ifname = ifname_of(pid, inst["ip"])
            mtu = mtu_of(pid, ifname)
            by_dst, rates = classes_by_destination(pid, ifname), htb_rates(pid, ifname)
            expected = {
                dst: htb_params(state.path(src, dst).rate_bps, wire_overhead=True, mtu_bytes=mtu).rate_bytes_ps
                for dst in ip_of
                if dst != src
            }
            actual = {dst: rates.get(by_dst.get(ip, "missing")) for dst, ip in ip_of.items() if dst != src}
            assert actual == expected, f"{src}: htb rate (bytes/s) per destination"


def _received_per_second(server_container: str, name: str) -> list[float]:
    report = json.loads(docker("exec", server_container, "cat", f"/tmp/{name}.json"))
    return [i["sum"]["bits_per_second"] for i in report["intervals"]]


def check_sharing(experiment: str, snapshots: dict, where: dict[str, int], engines: dict, node2: Node2) -> None:
    by_name = {i["name"]: i for s in snapshots.values() for i in s["instances"] if i["shaped"]}
    server_ip = by_name["server"]["ip"]
    wait_listening(by_name["server"]["container"], (5201, 5202))  # the server is pinned to node 1
    clients = [
        subprocess.Popen(
            [
                "docker",
                *([] if where[name] == 1 else ["-H", f"unix://{node2.socket}"]),
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
    received = {name: _received_per_second(by_name["server"]["container"], name) for name in ("a", "b")}
    log(
        f"two nodes: received per second (Mbit/s) from node {where['client']} "
        f"{[round(r / 1e6, 2) for r in received['a']]}, from node {where['client-2']} "
        f"{[round(r / 1e6, 2) for r in received['b']]}"
    )
    half = LINK_BPS / 2 * GOODPUT_SHARE
    for name, rates in received.items():  # seconds 2..8: both flows on, the first periods behind them
        rate = statistics.median(rates[2:8])
        assert 0.9 * half < rate < 1.1 * half, (name, rate, rates)
    together = [a + b for a, b in zip(received["a"][2:8], received["b"][2:8])]
    assert statistics.median(together) < 1.05 * LINK_BPS * GOODPUT_SHARE, together
    for node, fetch in ((1, status), (2, node2.status)):
        shared = fetch()["sharing"]
        metadata, aeron = shared["metadata"], shared["aeron"]
        # Messages of this node's own cores are dropped as "own": what is
        # accepted came from the other node's manager, one sender per core there.
        others = sum(1 for name, on in where.items() if on != node)
        assert metadata["accepted_messages"] > 0 and metadata["peers_heard"] == others, (node, metadata)
        assert set(metadata["dropped_messages"]) <= {"own"}, (node, metadata)
        assert aeron["running"] and aeron["problem"] is None, (node, aeron)
        bootstrapper = next(iter(_containers(engines[node], experiment, "bootstrapper")))
        assert (
            os.stat(f"/proc/{aeron['driver_pid']}/ns/net").st_ino
            == os.stat(f"/proc/{container_pid_on(engines[node], bootstrapper)}/ns/net").st_ino
        ), f"node {node}: the media driver is on the overlay"


def container_pid_on(engine_docker, container: str) -> int:
    return int(engine_docker("inspect", "-f", "{{.State.Pid}}", container).strip())


def check_removed(experiment: str, engines: dict, node2: Node2, inodes: set[int]) -> None:
    for node, engine_docker in engines.items():
        label = f"label=org.collapsar.experiment={experiment}"
        wait_for(
            f"node {node}: every container of the experiment removed",
            lambda: not engine_docker("ps", "-aq", "--filter", label).split(),  # noqa: B023 - called now
            90,
        )
        wait_for(
            f"node {node}: the experiment's network removed",
            lambda: not engine_docker("network", "ls", "-q", "--filter", label).split(),  # noqa: B023 - called now
            60,
        )
        remove_trace_volume(STACK, engine_docker)
    wait_for("no Collapsar process left on either node", lambda: not collapsar_processes(), 30)
    wait_for("the containers' namespaces gone", lambda: not (inodes & netns_inodes()), 30)
    host_bindings = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not [n for n in host_bindings + node2.netns_bindings() if n.startswith("cxd-")]


def test_container_mode_across_two_swarm_nodes(tmp_path, two_nodes):
    node2 = two_nodes
    engines = {1: docker, 2: node2.cli}
    out = tmp_path / "stack.yml"
    done = collapsar("generate", str(TOPOLOGY), "--swarm", "-o", str(out))
    assert (done.returncode, done.stderr) == (0, "")
    experiment = _placed_stack(out)["networks"]["collapsar"]["labels"]["org.collapsar.experiment"]
    assert not collapsar_processes(), "a Collapsar manager is already running on this host"
    docker("stack", "deploy", "-c", str(out), STACK)
    inodes: set[int] = set()
    try:
        snapshots = wait_for("both managers up, every instance shaped", lambda: _both_up(experiment, node2), 180)
        inodes = {
            os.stat(f"/proc/{i['pid']}/ns/net").st_ino
            for s in snapshots.values()
            for i in s["instances"]
            if i["shaped"]
        }
        where = check_placement(snapshots, engines, experiment)
        check_rates(snapshots, {i["name"]: i["ip"] for i in snapshots[1]["instances"]})
        check_sharing(experiment, snapshots, where, engines, node2)
    finally:
        run("docker", "stack", "rm", STACK, check=False)
        check_removed(experiment, engines, node2, inodes)
