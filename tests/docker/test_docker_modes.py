"""Container mode on a real engine: Swarm (single-node, initialised here)
and Compose (Debian 12's docker-compose 1.29; the v2 plugin is not packaged
there), the same topology and checks for both (scenario.py)."""

from __future__ import annotations

import pytest
import yaml
from dockerlib import (
    ROOT,
    TOPOLOGY,
    collapsar,
    container_pid,
    docker,
    labelled_containers,
    log,
    remove_trace_volume,
    run,
    tc_in,
    wait_for,
)
from scenario import exercise

STACK = "cxtest"
PROJECT = "cxcompose"


def generate(tmp_path, mode: str) -> tuple[str, str]:
    out = tmp_path / f"{mode}.yml"
    done = collapsar("generate", str(TOPOLOGY), f"--{mode}", "-o", str(out))
    assert (done.returncode, done.stderr) == (0, "")
    experiment = yaml.safe_load(out.read_text())["networks"]["collapsar"]["labels"]["org.collapsar.experiment"]
    return str(out), experiment


def test_swarm_stack_deploys_shapes_plays_and_leaves_nothing(tmp_path, images, swarm, netem_note):
    stack, experiment = generate(tmp_path, "swarm")
    checked = run("docker", "stack", "config", "-c", stack, check=False)
    if "config" in run("docker", "stack", "--help").stdout:
        assert checked.returncode == 0, checked.stderr
        config = yaml.safe_load(checked.stdout)
        assert config["services"]["client"]["deploy"]["replicas"] == 2
        assert config["services"]["collapsar-bootstrap"]["deploy"]["mode"] == "global"
    else:  # Debian 12's docker CLI (20.10) has no `stack config`; `stack deploy` validates the same schema
        log("swarm: this docker CLI has no `stack config`; the file is validated by `stack deploy` alone")
    seconds = exercise(
        "swarm",
        experiment,
        deploy=lambda: docker("stack", "deploy", "-c", stack, STACK),
        remove=lambda: remove_stack(experiment),
        manager_filter=f"name=collapsar-manager-{experiment}",
        also=swarm_names_agree,
    )
    assert seconds > 3  # `late` joins at t=3s: shaped only after its join


def remove_stack(experiment: str) -> None:
    """`docker stack rm` deletes the network while tasks are still stopping
    (the bootstrapper waits for the manager's teardown) and may fail with
    "network ... is in use"; once the tasks are gone a second rm takes it."""
    if run("docker", "stack", "rm", STACK, check=False).returncode != 0:
        wait_for("the stack's containers to go", lambda: not labelled_containers(experiment), 90)
        docker("stack", "rm", STACK)
    remove_trace_volume(STACK)


def swarm_names_agree(snapshot: dict) -> None:
    overlay_dns_agrees(snapshot)
    # Each task knows its instance name, as in local mode (a Swarm template
    # in the generated file expands per task).
    for inst in snapshot["instances"]:
        env = docker("inspect", "-f", "{{json .Config.Env}}", inst["container"])
        assert f'"COLLAPSAR_INSTANCE={inst["name"]}"' in env, (inst["name"], env)


def overlay_dns_agrees(snapshot: dict) -> None:
    """Other nodes' instances are found through the overlay's DNS: on this
    one node it must name every instance with the address the engine gives."""
    from collapsar.manager.container.dnsaddr import DnsAddresses

    bootstrapper = docker("ps", "-q", "--filter", f"name={STACK}_collapsar-bootstrap").split()[0]
    pid = container_pid(bootstrapper)
    found = DnsAddresses(pid, STACK, ["server", "client", "late"])()
    assert found == {inst["name"]: inst["ip"] for inst in snapshot["instances"]}


def test_compose_file_deploys_shapes_plays_and_leaves_nothing(tmp_path, images, netem_note):
    compose, experiment = generate(tmp_path, "compose")
    run("docker-compose", "-f", compose, "config", "-q")
    base = ("docker-compose", "-p", PROJECT, "-f", compose)

    def stop_manager_then_remove() -> None:
        """The manager alone first: what it installed in running containers
        must go with it (htb root, u32 filters, the counters' clsact)."""
        try:
            run(*base, "stop", "-t", "20", "collapsar-manager")
            for name in ("server", "client"):
                pid = container_pid(f"{PROJECT}_{name}_1")
                kinds = {q["kind"] for q in tc_in(pid, "qdisc", "show")}
                assert kinds <= {"noqueue"}, f"{name}: qdiscs left after the manager stopped: {kinds}"
        finally:
            run(*base, "down", "-t", "10")

    seconds = exercise(
        "compose",
        experiment,
        deploy=lambda: run(*base, "up", "-d"),
        remove=stop_manager_then_remove,
        manager_filter=f"label=com.docker.compose.project={PROJECT}",
    )
    assert seconds > 3


def test_demo_compose_file_validates(engine):
    """The top-level docker-compose.yml (the one-host demo) is a valid file."""
    run("docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q")


# Examples a Docker mode cannot run, and the key its one-line refusal names.
REFUSED = {
    ("slow-cpu", "--swarm"): "cpu-speed: swarm mode cannot honour it",
}


@pytest.mark.parametrize("path", sorted((ROOT / "topologies").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_generates_files_the_tools_accept(tmp_path, engine, path):
    for mode, out, check in (
        ("--compose", tmp_path / "compose.yml", lambda f: run("docker-compose", "-f", str(f), "config", "-q")),
        ("--swarm", tmp_path / "stack.yml", _stack_config),
    ):
        done = collapsar("generate", str(path), mode, "-o", str(out))
        refusal = REFUSED.get((path.stem, mode))
        if refusal is not None:
            assert done.returncode != 0 and refusal in done.stderr, done
            assert not out.exists()
            continue
        assert done.returncode == 0, done
        check(out)


def _stack_config(stack) -> None:
    if "config" in run("docker", "stack", "--help").stdout:
        run("docker", "stack", "config", "-c", str(stack))
