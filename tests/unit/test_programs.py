"""Which program a command starts and whether its instances find it
(collapsar.manager.programs), and how `collapsar validate` and `check` say so."""

import json
import pathlib
import subprocess
import sys

import pytest

from collapsar.errors import TopologyError, Where
from collapsar.manager.programs import (
    image_warnings,
    instance_path,
    missing_programs,
    require_programs,
    resolve,
    workload_build_dir,
)
from collapsar.model import Experiment, Service, Settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "collapsar.cli"]


def experiment(*services: Service) -> Experiment:
    return Experiment(Settings("x"), services, (), (), source="x.yaml")


def test_the_build_directory_is_this_checkouts():
    assert workload_build_dir() == ROOT / "workload-node" / "build"


def test_the_tools_come_after_the_path_and_only_once():
    build = str(workload_build_dir())
    assert instance_path("/usr/bin:/bin") == f"/usr/bin:/bin:{build}"
    assert instance_path(f"/usr/bin:{build}:/bin") == f"/usr/bin:{build}:/bin"
    assert instance_path("") == build


def test_a_program_is_found_as_execvp_would(tmp_path):
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("data\n")
    plain.chmod(0o644)
    assert resolve("tool", f"/nonexistent:{tool.parent}", "/") == str(tool)
    assert resolve("tool", "/nonexistent", "/") is None
    assert resolve("./bin/tool", "", str(tmp_path)) == str(tool)  # relative to the workdir
    assert resolve(str(tool), "", "/") == str(tool)
    assert resolve(str(plain), "/", "/") is None and resolve("bin", str(tmp_path), "/") is None


def test_missing_programs_name_the_place_the_program_and_the_fix(tmp_path):
    unbuilt = tmp_path / "workload-node" / "build"  # a checkout where `make` has not run
    exp = experiment(
        Service("ok", ("sh", "-c", "nonexistent-inside-the-script"), where=Where("x.yaml", 3)),
        Service("typo", ("iperf33", "-s"), where=Where("x.yaml", 4)),
        Service("quiet", where=Where("x.yaml", 5)),
        Service("own", ("wl-client",), env={"PATH": str(tmp_path)}, where=Where("x.yaml", 6)),
        Service("rel", ("./run.sh",), workdir=str(tmp_path), where=Where("x.yaml", 7)),
        Service("node", ("wl-node", "-b", "0.0.0.0:7000"), where=Where("x.yaml", 8)),
        Service("kollaps", ("server", "1"), image="kollaps/iperf3-client:1.0", where=Where("x.yaml", 9)),
    )
    assert [str(p) for p in missing_programs(exp, unbuilt)] == [
        f"x.yaml:4: service typo: program 'iperf33' is not on the instances' PATH (this host's PATH, then {unbuilt})",
        # An unbuilt checkout is one cause: one line, at the first service that needs the tools.
        f"x.yaml:6: services own, node: programs 'wl-client', 'wl-node' are not built (looked in the "
        f"service's env PATH, then {unbuilt}); fix: make -C workload-node",
        f"x.yaml:7: service rel: program './run.sh' does not exist or is not executable (relative to {tmp_path})",
        # A Kollaps import's command is its image's arguments: only local mode runs it as a program.
        f"x.yaml:9: service kollaps: program 'server' is not on the instances' PATH (this host's PATH, then "
        f"{unbuilt}); in local mode only: Compose and Swarm run the command in its image (kollaps/iperf3-client:1.0)",
    ]
    with pytest.raises(TopologyError) as raised:
        require_programs(exp)  # the real build: `own` finds its wl-client there
    assert raised.value.exit_code == 2 and [line.split(":")[1] for line in raised.value.lines()] == ["4", "7", "9"]
    lone = experiment(Service("c", ("wl-client",), where=Where("x.yaml", 2)))
    assert [str(p) for p in missing_programs(lone, unbuilt)] == [
        f"x.yaml:2: service c: program 'wl-client' is not built (looked in this host's PATH, then {unbuilt}); "
        f"fix: make -C workload-node"
    ]


def test_the_built_tools_are_found_by_name():
    if not (workload_build_dir() / "wl-client").exists():
        pytest.fail(f"wl-client is not built in {workload_build_dir()}: make -C workload-node")
    assert missing_programs(experiment(Service("c", ("wl-client", "--to", "s")), Service("s", ("wl-node",)))) == []


def test_an_image_of_its_own_that_runs_the_workload_tools_is_a_warning():
    exp = experiment(
        Service("a", ("wl-node", "-b", "0.0.0.0:7000"), image="alpine:3", where=Where("x.yaml", 3)),
        Service(
            "b",
            ("sh", "-c", "sleep 1; exec /opt/wl-client --to a && wl-node"),
            image="deb:12",
            where=Where("x.yaml", 4),
        ),
        Service("c", ("wl-node",), image="collapsar/node:0.1.0", where=Where("x.yaml", 5)),
        Service("d", ("wl-node",), where=Where("x.yaml", 6)),
        Service("e", ("echo", "my-wl-node-notes"), image="alpine:3", where=Where("x.yaml", 7)),
    )
    assert [str(p) for p in image_warnings(exp)] == [
        "x.yaml:3: service a: its command runs wl-node, but in Compose and Swarm it runs in its own image "
        "(alpine:3), which may lack it; a service without `image` runs in collapsar/node, which has wl-node "
        "and wl-client",
        "x.yaml:4: service b: its command runs wl-client and wl-node, but in Compose and Swarm it runs in its "
        "own image (deb:12), which may lack them; a service without `image` runs in collapsar/node, which has "
        "wl-node and wl-client",
    ]


TOPOLOGY = """\
experiment: {name: progs}
services:
  front: {command: [wl-node]}
  gone: {command: [no-such-program-here, -x]}
  box: {image: "alpine:3", command: [wl-client, --to, front]}
bridges: [sw]
links:
  - {from: front, to: sw, bandwidth: 10Mbps}
  - {from: gone, to: sw, bandwidth: 10Mbps}
  - {from: box, to: sw, bandwidth: 10Mbps}
"""


def test_validate_warns_and_exits_0_text_and_json(tmp_path):
    (tmp_path / "p.yaml").write_text(TOPOLOGY)
    done = subprocess.run([*CLI, "validate", "p.yaml"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0
    assert done.stdout == "p.yaml: ok: 3 services (3 instances), 1 bridge, 3 links, 0 events\n"
    assert done.stderr.splitlines() == [
        f"p.yaml:4: warning: service gone: program 'no-such-program-here' is not on the instances' PATH "
        f"(this host's PATH, then {workload_build_dir()})",
        "p.yaml:5: warning: service box: its command runs wl-client, but in Compose and Swarm it runs in its "
        "own image (alpine:3), which may lack it; a service without `image` runs in collapsar/node, which has "
        "wl-node and wl-client",
    ]
    as_json = subprocess.run(
        [*CLI, "validate", "p.yaml", "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert (as_json.returncode, as_json.stderr) == (0, "")
    verdict = json.loads(as_json.stdout)
    assert verdict["ok"] is True and verdict["problems"] == []
    assert [(w["file"], w["line"], w["message"].split(":")[0]) for w in verdict["warnings"]] == [
        ("p.yaml", 4, "service gone"),
        ("p.yaml", 5, "service box"),
    ]
    assert "program 'no-such-program-here' is not on the instances' PATH" in verdict["warnings"][0]["message"]


def test_a_dry_run_refuses_a_missing_program_in_one_line(tmp_path):
    """`collapsar run` checks programs before anything (even a plan) is made;
    the kernel tier runs the real thing as root."""
    (tmp_path / "p.yaml").write_text(TOPOLOGY.replace('image: "alpine:3", ', ""))
    done = subprocess.run(
        [*CLI, "run", "--dry-run", "p.yaml", "--run-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"p.yaml:4: service gone: program 'no-such-program-here' is not on the instances' "
        f"PATH (this host's PATH, then {workload_build_dir()})\n"
    )
    assert not (tmp_path / "runs").exists()
