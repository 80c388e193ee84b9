"""collapsar.deploy: the generated Swarm and Compose files, exactly."""

import base64
import os
import subprocess
import sys

import pytest
import yaml

from collapsar.commands.generate import generate_text
from collapsar.deploy.manager_spec import MANAGER_SPEC, sdk_run_kwargs
from collapsar.deploy.naming import check_service_name, experiment_id, instance_of, replica_of
from collapsar.deploy.stack import WAIT_FOR_SHAPING
from collapsar.deploy.subnet import addresses_needed, check_subnet, size_subnet
from collapsar.errors import CollapsarError
from collapsar.parser import parse_file, parse_text
from collapsar.timeline import build_timeline

TOPOLOGY = """\
experiment: {name: Tiny-Test}
services:
  server: {command: [wl-node, --port, 7000], cpus: 0.5, memory: 256m, env: {MODE: fast}}
  client: {image: "busybox:1.36", command: "sleep 60", replicas: 2}
  late: {command: [iperf3, -s], replicas: 0}
bridges: [s1]
links:
  - {from: client, to: s1, bandwidth: 10Mbps}
  - {from: s1, to: server, bandwidth: 20Mbps}
  - {from: late, to: s1, bandwidth: 5Mbps}
events:
  - {at: 5s, service: late, action: join, amount: 1}
  - {at: 6s, service: client, action: join, amount: 1}
"""
EXP_ID = "tiny-test-" + __import__("hashlib").sha256(TOPOLOGY.encode()).hexdigest()[:8]
LABELS = lambda role, service=None: {  # noqa: E731
    "org.collapsar.experiment": EXP_ID,
    "org.collapsar.role": role,
    **({"org.collapsar.service": service} if service else {}),
}
B64 = base64.b64encode(TOPOLOGY.encode()).decode()


@pytest.fixture
def topology(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TOPOLOGY)
    return str(path)


def generated(path, swarm, **kw):
    text = generate_text(path, swarm, **kw)
    head = text.splitlines()[:2]
    return head, yaml.safe_load(text)


# The workload image's commands wait for the manager's mark (an image of the
# user's own, like busybox below, keeps its command as written).
WAITING = ["sh", "-c", WAIT_FOR_SHAPING.replace("$", "$$"), "collapsar-wait"]  # `$$`: the files interpolate `$`


def test_dollar_signs_of_commands_and_environment_reach_the_container_as_written(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "experiment: {name: d}\nservices:\n"
        '  a: {image: "x:1", command: [sh, -c, "echo $HOME $((1+1))"], env: {P: "a$b"}}\n'
        '  b: {command: [sh, -c, "echo $COLLAPSAR_INSTANCE"]}\n'
        "links:\n  - {from: a, to: b, bandwidth: 1Mbps}\n"
    )
    for swarm in (True, False):
        doc = generated(str(path), swarm=swarm)[1]
        assert doc["services"]["a"]["command"] == ["sh", "-c", "echo $$HOME $$((1+1))"]
        assert doc["services"]["a"]["environment"]["P"] == "a$$b"
        assert doc["services"]["b"]["command"][-1] == "echo $$COLLAPSAR_INSTANCE"


def test_the_wait_for_shaping_runs_the_command_only_after_the_mark(tmp_path):
    import subprocess
    import time

    mark = tmp_path / "shaped"
    mark.write_text("left by an earlier start\n")
    script = WAIT_FOR_SHAPING.replace("/tmp/collapsar-shaped", str(mark))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        ["sh", "-c", script, "collapsar-wait", "sh", "-c", f'echo started "$0" > {out}', "with args"]
    )
    try:
        time.sleep(0.5)
        assert not out.exists() and not mark.exists()  # the old mark was removed; still waiting
        mark.write_text("shaped\n")
        assert proc.wait(timeout=5) == 0
        assert out.read_text() == "started with args\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("given, expected", [(None, "client-2"), ("from-swarm", "from-swarm")])
def test_the_wait_for_shaping_names_a_compose_replica_from_the_managers_hosts_block(tmp_path, given, expected):
    """Compose replicas are identical containers: the instance name (which
    names the trace files) comes from the block the manager wrote, unless
    the environment already has one (Swarm's template)."""
    from collapsar.manager.container.hostsfile import with_block

    hosts, hostname, mark = tmp_path / "hosts", tmp_path / "hostname", tmp_path / "shaped"
    docker_own = "127.0.0.1\tlocalhost\n10.201.0.4\t3f4e5d6c7b8a\n"
    hosts.write_text(with_block(docker_own, {"client": "10.201.0.3", "client-2": "10.201.0.4", "server": "10.201.0.2"}))
    hostname.write_text("3f4e5d6c7b8a\n")
    script = (
        WAIT_FOR_SHAPING.replace("rm -f /tmp/collapsar-shaped; ", "")  # the mark is already there
        .replace("/tmp/collapsar-shaped", str(mark))
        .replace("/etc/hostname", str(hostname))
        .replace("/etc/hosts", str(hosts))
    )
    mark.write_text("shaped\n")
    env = {"PATH": os.environ["PATH"], **({"COLLAPSAR_INSTANCE": given} if given else {})}
    done = subprocess.run(
        ["sh", "-c", script, "collapsar-wait", "sh", "-c", 'echo "$COLLAPSAR_INSTANCE"'],
        capture_output=True,
        text=True,
        env=env,
        timeout=10,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{expected}\n", "")


def test_swarm_stack_is_exactly_this(topology):
    head, doc = generated(topology, swarm=True)
    assert head[1] == f"# experiment {EXP_ID}: 5 instances, subnet 10.201.0.0/25"
    assert doc["version"] == "3.8"
    assert list(doc["services"]) == ["server", "client", "late", "collapsar-bootstrap"]
    assert doc["services"]["server"] == {
        "image": "collapsar/node:0.1.0",
        "command": WAITING + ["wl-node", "--port", "7000"],
        "environment": {
            "MODE": "fast",
            "COLLAPSAR_SERVICE": "server",
            "COLLAPSAR_EXPERIMENT": EXP_ID,
            "COLLAPSAR_TRACE_DIR": "/collapsar/workload",
            # Swarm expands it per task: server, server-2, ...
            "COLLAPSAR_INSTANCE": '{{if eq .Task.Slot "1"}}server{{else}}server-{{.Task.Slot}}{{end}}',
        },
        "labels": LABELS("instance", "server"),
        "networks": ["collapsar"],
        # Traces: a volume each node creates for its own tasks (STACK_collapsar-workload).
        "volumes": ["collapsar-workload:/collapsar/workload"],
        "deploy": {
            "mode": "replicated",
            "replicas": 1,
            "endpoint_mode": "dnsrr",
            "labels": LABELS("instance", "server"),
            "restart_policy": {"condition": "none"},
            "resources": {"limits": {"cpus": "0.5", "memory": "256M"}},
        },
    }
    # Swarm starts with the instances at t=0; the manager scales up at each join.
    assert doc["services"]["client"]["image"] == "busybox:1.36"
    assert doc["services"]["client"]["command"] == ["sleep", "60"]
    # An image of the user's own: no trace directory imposed on it.
    assert "volumes" not in doc["services"]["client"]
    assert "COLLAPSAR_TRACE_DIR" not in doc["services"]["client"]["environment"]
    assert doc["services"]["client"]["deploy"]["replicas"] == 2
    assert doc["services"]["late"]["deploy"]["replicas"] == 0
    assert doc["services"]["collapsar-bootstrap"] == {
        "image": "collapsar/manager:0.1.0",
        "command": ["collapsar", "manager", "--bootstrap"],
        "environment": {
            "COLLAPSAR_EXPERIMENT": EXP_ID,
            "COLLAPSAR_TOPOLOGY_B64": B64,
            "COLLAPSAR_MANAGER_IMAGE": "collapsar/manager:0.1.0",
        },
        "volumes": ["/var/run/docker.sock:/var/run/docker.sock"],
        "labels": LABELS("bootstrapper"),
        "networks": ["collapsar"],
        # The metadata key, to the bootstrapper alone (0o400 = 256).
        "secrets": [{"source": "collapsar-metadata-key", "target": "collapsar-metadata-key", "mode": 256}],
        "deploy": {
            "mode": "global",
            "endpoint_mode": "dnsrr",
            "labels": LABELS("bootstrapper"),
            "restart_policy": {"condition": "on-failure"},
        },
    }
    assert doc["networks"] == {
        "collapsar": {
            "driver": "overlay",
            "attachable": True,
            "labels": {"org.collapsar.experiment": EXP_ID},
            "ipam": {"config": [{"subnet": "10.201.0.0/25"}]},
        }
    }
    assert doc["secrets"] == {"collapsar-metadata-key": {"file": f"./{EXP_ID}.metadata-key"}}
    assert doc["volumes"] == {"collapsar-workload": {"labels": {"org.collapsar.experiment": EXP_ID}}}
    assert [name for name, spec in doc["services"].items() if "secrets" in spec] == ["collapsar-bootstrap"]


def test_compose_file_is_exactly_this(topology):
    _, doc = generated(topology, swarm=False, subnet="10.9.0.0/16", manager_image="m:1", node_image="n:1")
    assert "version" not in doc and "name" not in doc  # docker-compose v1 rejects `name`
    assert doc["services"]["server"] == {
        "image": "n:1",
        "command": WAITING + ["wl-node", "--port", "7000"],
        "environment": {
            "MODE": "fast",
            "COLLAPSAR_SERVICE": "server",
            "COLLAPSAR_EXPERIMENT": EXP_ID,
            "COLLAPSAR_TRACE_DIR": "/collapsar/workload",
        },
        "labels": LABELS("instance", "server"),
        "networks": ["collapsar"],
        "scale": 1,
        "restart": "no",
        "cpus": 0.5,
        "mem_limit": "256M",
        "memswap_limit": "256M",  # no swap beyond the limit, as in local mode
        # Traces land beside the Compose file, in a directory named by the experiment.
        "volumes": [f"./{EXP_ID}.workload:/collapsar/workload"],
    }
    assert "volumes" not in doc["services"]["client"] and "volumes" not in doc
    # Compose: two at t=0 plus one join, the third held stopped until its join.
    assert doc["services"]["client"]["scale"] == 3
    assert doc["services"]["late"]["scale"] == 1
    assert doc["services"]["collapsar-manager"] == {
        "image": "m:1",
        "command": ["collapsar", "manager", "--docker"],
        "environment": {"COLLAPSAR_EXPERIMENT": EXP_ID, "COLLAPSAR_TOPOLOGY_B64": B64},
        "labels": LABELS("manager"),
        "cap_add": ["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE", "SYS_NICE"],
        "security_opt": ["seccomp=unconfined", "apparmor=unconfined"],
        "pid": "host",
        "network_mode": "host",
        "shm_size": "512m",
        "volumes": ["/var/run/docker.sock:/var/run/docker.sock", "/sys/fs/bpf:/sys/fs/bpf"],
    }
    assert doc["networks"]["collapsar"] == {
        "driver": "bridge",
        "labels": {"org.collapsar.experiment": EXP_ID},
        "ipam": {"config": [{"subnet": "10.9.0.0/16"}]},
    }


def test_bootstrapper_starts_the_manager_compose_describes():
    kwargs = sdk_run_kwargs("m:1", "mgr", {"A": "1"}, {"L": "2"})
    assert kwargs == {
        "image": "m:1",
        "name": "mgr",
        "command": ["collapsar", "manager", "--docker"],
        "environment": {"A": "1"},
        "labels": {"L": "2"},
        "detach": True,
        "cap_add": list(MANAGER_SPEC["cap_add"]),
        "security_opt": list(MANAGER_SPEC["security_opt"]),
        "pid_mode": "host",
        "network_mode": "host",
        "shm_size": "512m",
        "volumes": {
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
            "/sys/fs/bpf": {"bind": "/sys/fs/bpf", "mode": "rw"},
        },
        "restart_policy": {"Name": "on-failure", "MaximumRetryCount": 3},
    }


@pytest.mark.parametrize(
    "instances, headroom, subnet",
    [
        (1, 32, "10.201.0.0/25"),  # 1 + 64 + 3 = 68 addresses
        (61, 32, "10.201.0.0/25"),  # exactly 128
        (62, 32, "10.201.0.0/24"),
        (300, 32, "10.201.0.0/23"),  # a /24 would break here (Kollaps's default)
        (5000, 32, "10.201.0.0/19"),
        (10, 1, "10.201.0.0/28"),  # 10 + 2 + 3 = 15
    ],
)
def test_subnet_is_sized_for_the_topology(instances, headroom, subnet):
    assert size_subnet(instances, headroom) == subnet


def test_a_given_subnet_must_hold_the_experiment():
    assert addresses_needed(200) == 267
    assert check_subnet("10.5.0.0/23", 200) == "10.5.0.0/23"
    with pytest.raises(
        CollapsarError,
        match=r"--subnet 10.5.0.0/24: holds 256 addresses, the experiment "
        r"needs 267 .*expected at least a /23",
    ):
        check_subnet("10.5.0.0/24", 200)
    with pytest.raises(CollapsarError, match="expected an IPv4 network"):
        check_subnet("10.5.0.1/24", 2)
    with pytest.raises(CollapsarError, match="expected an IPv4 network"):
        check_subnet("fd00::/64", 2)


def test_experiment_id_is_name_and_content():
    experiment = parse_text(TOPOLOGY)
    assert experiment_id(experiment, TOPOLOGY) == EXP_ID
    assert experiment_id(experiment, TOPOLOGY + "\n") != EXP_ID


@pytest.mark.parametrize(
    "labels, replica",
    [
        ({"com.docker.swarm.task.name": "st_web.3.k2j3h4"}, 3),
        ({"com.docker.swarm.task.name": "st_collapsar-bootstrap.nodeid.k2j3h4"}, None),  # global task
        ({"com.docker.compose.container-number": "2"}, 2),
        ({}, None),
    ],
)
def test_replica_comes_from_the_engine_labels(labels, replica):
    assert replica_of(labels) == replica


def test_instance_of_a_container():
    mine = {"org.collapsar.experiment": "e-1", "org.collapsar.role": "instance", "org.collapsar.service": "web"}
    assert instance_of({**mine, "com.docker.swarm.task.name": "st_web.1.x"}, "e-1") == "web"
    assert instance_of({**mine, "com.docker.compose.container-number": "4"}, "e-1") == "web-4"
    assert instance_of({**mine, "com.docker.compose.container-number": "4"}, "e-2") is None
    assert (
        instance_of({**mine, "org.collapsar.role": "manager", "com.docker.compose.container-number": "1"}, "e-1")
        is None
    )


def test_service_names_docker_rejects_are_named(tmp_path):
    assert check_service_name("web_1.a-b", "") == "web_1.a-b"
    with pytest.raises(CollapsarError, match="service collapsar-bootstrap: Docker needs"):
        check_service_name("collapsar-bootstrap", "")
    with pytest.raises(CollapsarError, match="service " + "x" * 49 + ": Docker needs"):
        check_service_name("x" * 49, "")


def test_cli_writes_the_file_and_needs_a_mode(topology, tmp_path):
    out = tmp_path / "stack.yml"
    done = subprocess.run(
        [sys.executable, "-m", "collapsar.cli", "generate", topology, "--swarm", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert yaml.safe_load(out.read_text())["services"]["client"]["deploy"]["replicas"] == 2
    # The stack's secret, beside it: a fresh 32-byte key, readable by its owner only.
    key_file = tmp_path / f"{EXP_ID}.metadata-key"
    first = key_file.read_text()
    assert len(bytes.fromhex(first.strip())) == 32 and os.stat(key_file).st_mode & 0o777 == 0o600
    subprocess.run(
        [sys.executable, "-m", "collapsar.cli", "generate", topology, "--swarm", "-o", "-"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    )
    assert key_file.read_text() != first  # `-o -`: in the current directory, as `docker stack deploy -c -` reads
    done = subprocess.run(
        [sys.executable, "-m", "collapsar.cli", "generate", topology, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "one of the arguments --swarm --compose is required" in done.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "collapsar.cli",
            "generate",
            topology,
            "--compose",
            "--subnet",
            "10.0.0.0/30",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.startswith("collapsar: --subnet 10.0.0.0/30: holds 4 addresses")


@pytest.mark.parametrize("name", ["churn", "demo", "dumbbell", "flaky", "geo", "local-iperf"])
def test_every_example_generates_both_files(name):
    from collapsar.manager.experiment import all_instances
    from collapsar.parser import parse_file
    from collapsar.timeline import build_timeline

    path = os.path.join(os.path.dirname(__file__), "..", "..", "topologies", f"{name}.yaml")
    timeline = build_timeline(parse_file(path))
    services = [s.name for s in parse_file(path).services]
    _, swarm = generated(path, swarm=True)
    _, compose = generated(path, swarm=False)
    assert list(swarm["services"]) == services + ["collapsar-bootstrap"]
    assert list(compose["services"]) == services + ["collapsar-manager"]
    assert sum(swarm["services"][s]["deploy"]["replicas"] for s in services) == len(timeline.steps[0].state.instances)
    assert sum(compose["services"][s]["scale"] for s in services) == len(all_instances(timeline))


@pytest.mark.parametrize("swarm", [True, False], ids=["swarm", "compose"])
def test_a_traced_link_reaches_the_managers_as_the_set_events_it_compiles_to(tmp_path, swarm):
    """The managers see the stack's text, not the trace files beside the
    experiment: the text they get gives the same timeline, step for step."""
    (tmp_path / "rates.csv").write_text("time,bandwidth\n0s,8Mbps\n1s,2Mbps\n2s,5Mbps\n")
    path = tmp_path / "traced.yaml"
    path.write_text(TOPOLOGY.replace("bandwidth: 20Mbps}", "trace: rates.csv}", 1))
    _, doc = generated(str(path), swarm=swarm)
    (encoded,) = [
        svc["environment"]["COLLAPSAR_TOPOLOGY_B64"]
        for svc in doc["services"].values()
        if "COLLAPSAR_TOPOLOGY_B64" in svc.get("environment", {})
    ]
    shipped = base64.b64decode(encoded).decode()
    assert shipped.startswith("# traced.yaml as Collapsar compiled it")
    assert "trace:" not in shipped
    original, compiled = build_timeline(parse_file(path)), build_timeline(parse_text(shipped, "<shipped>"))
    assert (
        [s.at_us for s in compiled.steps]
        == [s.at_us for s in original.steps]
        == [0, 1_000_000, 2_000_000, 5_000_000, 6_000_000]
    )
    for ours, theirs in zip(original.steps, compiled.steps):
        assert sorted(map(repr, theirs.state.paths())) == sorted(map(repr, ours.state.paths()))


def test_a_trace_too_long_for_the_managers_environment_is_one_line(tmp_path):
    rows = "".join(f"{t * 100}ms,{1 + t % 7}Mbps\n" for t in range(6000))
    (tmp_path / "long.csv").write_text("time,bandwidth\n" + rows)
    path = tmp_path / "traced.yaml"
    path.write_text(TOPOLOGY.replace("bandwidth: 20Mbps}", "trace: {file: long.csv, step: 100ms}}", 1))
    with pytest.raises(
        CollapsarError,
        match=r"traced.yaml:\d+: link .*: trace: with every step written out the "
        r"experiment is \d+ bytes, more than the 98304 a container's environment carries",
    ):
        generate_text(str(path), True)
