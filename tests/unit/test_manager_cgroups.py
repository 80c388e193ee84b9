"""Local mode's limits without a kernel: which hierarchy holds each
controller (cgroup v1, v2, both, none) from mountinfo, the values each key
writes, the checks at run start, the groups a run makes in a fake tree
(journaled first), the shell prefix that puts a command into its groups
before it runs, and OOM kills counted from the kernel's files.  The same
on a real kernel: tests/kernel/test_local_limits.py (v1) and the VM tier
(v2)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cgroup_support import mount_line, v1_tree, v2_tree

from collapsar.cpuspeed import CpuBandwidth
from collapsar.errors import EnvironmentProblem
from collapsar.manager.local.cgroups import Hierarchy, Write, detect, host_cpus, limit_writes, oom_kills
from collapsar.manager.local.limits import JOIN_SCRIPT, RunGroups
from collapsar.parser import parse_text

LIMITED = """\
services:
  busy: {command: [x], cpus: 0.5, replicas: 2}
  pinned: {command: [x], cpuset: "1,3"}
  hog: {command: [x], memory: 64m}
  free: {command: [x]}
"""
INSTANCES = ["busy", "busy-2", "pinned", "hog", "free"]


class Recorded:
    """A journal that keeps its records."""

    def __init__(self):
        self.records: list[dict] = []

    def record(self, kind: str, **fields) -> None:
        self.records.append({"kind": kind, **fields})


def test_v1_hierarchies_are_found_per_controller_comounted_or_not(tmp_path):
    _, layout = v1_tree(tmp_path)
    assert layout.hierarchies == {
        "cpu": Hierarchy(1, tmp_path / "cpu,cpuacct"),
        "cpuset": Hierarchy(1, tmp_path / "cpuset"),
        "memory": Hierarchy(1, tmp_path / "memory"),
    }
    assert layout.v2_mount == tmp_path / "unified"  # there, but offering none of them


def test_v2_offers_every_controller_its_root_lists(tmp_path):
    _, layout = v2_tree(tmp_path)
    assert layout.hierarchies == {c: Hierarchy(2, tmp_path) for c in ("cpu", "cpuset", "memory")}
    assert layout.distinct(["cpu", "cpuset", "memory"]) == ["cpu"]  # one group holds all three


def test_a_hybrid_host_takes_each_controller_where_it_is(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cgroup.controllers").write_text("cpu memory\n")  # cpu is v1's: not really offered
    text = mount_line(30, tmp_path / "cpu", "cgroup", "cpu") + "\n" + mount_line(31, tmp_path / "v2", "cgroup2", "")
    layout = detect(text)
    assert layout.hierarchies == {"cpu": Hierarchy(1, tmp_path / "cpu"), "memory": Hierarchy(2, tmp_path / "v2")}
    assert detect("22 1 0:21 / /sys rw - sysfs sysfs rw\n").hierarchies == {}


def test_a_mount_point_with_a_space_is_unescaped(tmp_path):
    mount = tmp_path / "my cgroups"
    mount.mkdir()
    line = mount_line(30, tmp_path / "my\\040cgroups", "cgroup", "memory")
    assert detect(line).hierarchies == {"memory": Hierarchy(1, mount)}


def test_each_key_writes_what_docker_would_v1(tmp_path):
    _, layout = v1_tree(tmp_path)
    assert limit_writes(layout, CpuBandwidth(50_000, 100_000), (0, 1, 3), 64 << 20) == [
        Write("cpu", "cpu.cfs_period_us", "100000"),
        Write("cpu", "cpu.cfs_quota_us", "50000"),
        Write("cpuset", "cpuset.cpus", "0-1,3"),
        Write("memory", "memory.limit_in_bytes", "67108864"),
        Write("memory", "memory.memsw.limit_in_bytes", "67108864", optional=True),
    ]


def test_each_key_writes_what_docker_would_v2(tmp_path):
    _, layout = v2_tree(tmp_path)
    assert limit_writes(layout, CpuBandwidth(225_000, 100_000), (2,), 512 << 20) == [
        Write("cpu", "cpu.max", "225000 100000"),
        Write("cpuset", "cpuset.cpus", "2"),
        Write("memory", "memory.max", "536870912"),
        Write("memory", "memory.swap.max", "0", optional=True),
    ]
    assert limit_writes(layout, None, None, None) == []


def test_host_cpus_and_oom_kills_are_read_from_the_kernels_files(tmp_path):
    _, v1 = v1_tree(tmp_path / "one", cpus="0-1,4")
    _, v2 = v2_tree(tmp_path / "two", cpus="0-7")
    assert host_cpus(v1) == (0, 1, 4) and host_cpus(v2) == tuple(range(8))
    group = tmp_path / "group"
    group.mkdir()
    (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert oom_kills(v1, group) == 3 and oom_kills(v2, group) == 2
    assert oom_kills(v1, tmp_path / "gone") is None


def test_only_limited_instances_get_groups_and_none_without_limits(tmp_path):
    _, layout = v1_tree(tmp_path)
    groups = RunGroups.plan(parse_text(LIMITED, "t.yaml"), INSTANCES, "a1b2c3", layout)
    assert groups is not None
    assert sorted(groups.limited) == ["busy", "busy-2", "hog", "pinned"]
    assert groups.controllers == ["cpu", "cpuset", "memory"]
    assert groups.join_argv("free") == []
    free = parse_text("services:\n  free: {command: [x]}\n", "t.yaml")
    assert RunGroups.plan(free, ["free"], "a1b2c3", layout) is None


@pytest.mark.parametrize(
    "service, cpus_here, problem",
    [
        (
            "{command: [x], cpuset: 2-5}",
            "0-3",
            "t.yaml:2: service s: cpuset 2-5: this host has no CPU 4-5 (its CPUs: 0-3); fix: choose CPUs among 0-3",
        ),
        (
            "{command: [x], cpus: 0.005}",
            "0-3",
            "t.yaml:2: service s: cpus 0.005 is below the kernel's smallest share of CPU time, 0.01 "
            "(1 ms in each 100 ms period); fix: set cpus to 0.01 or more",
        ),
        (
            "{command: [x], cpus: 3}",
            "0-3",
            "t.yaml:2: service s: cpus 3 is more than the 2 CPUs this host has, so it would limit nothing; "
            "fix: set cpus to 2 or less, or run on a host with more CPUs",
        ),
    ],
)
def test_a_limit_this_host_cannot_apply_is_refused_at_run_start(tmp_path, monkeypatch, service, cpus_here, problem):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    _, layout = v1_tree(tmp_path, cpus=cpus_here)
    experiment = parse_text(f"services:\n  s: {service}\n", "t.yaml")
    with pytest.raises(EnvironmentProblem) as refused:
        RunGroups.plan(experiment, ["s"], "a1b2c3", layout)
    assert str(refused.value) == problem


def test_a_missing_controller_is_refused_with_the_fix(tmp_path):
    (tmp_path / "cpu").mkdir()
    layout = detect(mount_line(30, tmp_path / "cpu", "cgroup", "cpu"))
    experiment = parse_text("services:\n  s: {command: [x], memory: 1g}\n", "t.yaml")
    with pytest.raises(EnvironmentProblem) as refused:
        RunGroups.plan(experiment, ["s"], "a1b2c3", layout)
    assert str(refused.value).startswith(
        "t.yaml:2: service s: memory needs the memory cgroup controller, which this host does not offer "
        "(no cgroup v1 hierarchy has it, and no cgroup2 mount); fix: mount it (cgroup v1: "
        "`mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory`"
    )


def test_a_v1_run_journals_each_group_before_making_it_and_writes_its_limits(tmp_path):
    _, layout = v1_tree(tmp_path)
    groups = RunGroups.plan(parse_text(LIMITED, "t.yaml"), INSTANCES, "a1b2c3", layout)
    journal, said = Recorded(), []
    groups.create(journal, said.append)
    cpu, cpuset, memory = (tmp_path / name / "collapsar-a1b2c3" for name in ("cpu,cpuacct", "cpuset", "memory"))
    assert journal.records == [
        {"kind": "cgroup", "controller": "cpu", "instance": None, "path": str(cpu)},
        {"kind": "cgroup", "controller": "cpuset", "instance": None, "path": str(cpuset)},
        {"kind": "cgroup", "controller": "memory", "instance": None, "path": str(memory)},
        {"kind": "cgroup", "controller": "cpu", "instance": "busy", "path": str(cpu / "busy")},
        {"kind": "cgroup", "controller": "cpu", "instance": "busy-2", "path": str(cpu / "busy-2")},
        {"kind": "cgroup", "controller": "cpuset", "instance": "pinned", "path": str(cpuset / "pinned")},
        {"kind": "cgroup", "controller": "memory", "instance": "hog", "path": str(memory / "hog")},
    ]
    assert (cpu / "busy" / "cpu.cfs_quota_us").read_text() == "50000"
    assert (cpu / "busy-2" / "cpu.cfs_period_us").read_text() == "100000"
    assert (cpuset / "pinned" / "cpuset.cpus").read_text() == "1,3"
    assert (memory / "hog" / "memory.limit_in_bytes").read_text() == str(64 << 20)
    assert not (memory / "hog" / "memory.memsw.limit_in_bytes").exists()  # no swap accounting here: skipped
    assert said == [
        f"limits: 4 instance(s) in their own control groups, cgroups (cpu: v1 at {tmp_path}/cpu,cpuacct, "
        f"cpuset: v1 at {tmp_path}/cpuset, memory: v1 at {tmp_path}/memory)"
    ]
    assert groups.join_argv("busy")[-2:] == [str(cpu / "busy" / "cgroup.procs"), "--"]


def test_a_v2_run_enables_the_controllers_it_needs_and_makes_one_group_per_instance(tmp_path):
    _, layout = v2_tree(tmp_path, subtree="cpu memory")
    experiment = parse_text("services:\n  s: {command: [x], cpuset: '0', memory: 8m}\n", "t.yaml")
    groups = RunGroups.plan(experiment, ["s"], "a1b2c3", layout)
    journal, said = Recorded(), []
    groups.create(journal, said.append)
    run = tmp_path / "collapsar-a1b2c3"
    assert [r["path"] for r in journal.records] == [str(run), str(run / "s")]
    assert said[0] == f"cgroup v2: enabled cpuset for the groups under {tmp_path} (left enabled, as systemd would)"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpuset"
    assert (run / "s" / "cpuset.cpus").read_text() == "0"
    assert (run / "s" / "memory.max").read_text() == str(8 << 20)
    assert groups.join_argv("s") == ["sh", "-c", JOIN_SCRIPT, "collapsar-join", str(run / "s" / "cgroup.procs"), "--"]


def test_the_prefix_joins_each_group_with_the_pid_that_then_runs_the_command(tmp_path):
    procs = [tmp_path / "cpu.procs", tmp_path / "memory.procs"]
    done = subprocess.run(
        ["sh", "-c", JOIN_SCRIPT, "collapsar-join", *map(str, procs), "--", "sh", "-c", "echo $$"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = done.stdout.strip()
    assert [path.read_text().strip() for path in procs] == [pid, pid]


def test_a_group_it_cannot_join_stops_the_command_before_it_runs(tmp_path):
    ran = tmp_path / "ran"
    done = subprocess.run(
        ["sh", "-c", JOIN_SCRIPT, "collapsar-join", str(tmp_path / "no" / "cgroup.procs"), "--", "touch", str(ran)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 125 and not ran.exists()
    assert f"collapsar: cannot join the control group {tmp_path}/no/cgroup.procs" in done.stderr


def test_an_oom_kill_counts_only_after_the_command_started(tmp_path):
    _, layout = v2_tree(tmp_path)
    experiment = parse_text("services:\n  s: {command: [x], memory: 8m}\n  t: {command: [x], cpus: 1}\n", "t.yaml")
    groups = RunGroups.plan(experiment, ["s", "t"], "a1b2c3", layout)
    groups.create(Recorded(), lambda line: None)
    events = tmp_path / "collapsar-a1b2c3" / "s" / "memory.events"
    events.write_text("oom 1\noom_kill 1\n")  # an earlier life of the instance
    groups.started("s")
    assert not groups.oom_killed("s")
    events.write_text("oom 2\noom_kill 2\n")
    assert groups.oom_killed("s")
    groups.started("t")
    assert not groups.oom_killed("t")  # no memory limit: nothing counted


def test_a_group_path_is_derived_from_the_run_id_and_instance(tmp_path):
    _, layout = v1_tree(tmp_path)
    assert layout.group("memory", "a1b2c3", "web-2") == tmp_path / "memory" / "collapsar-a1b2c3" / "web-2"
    assert layout.group("cpu", "a1b2c3", None) == Path(tmp_path / "cpu,cpuacct" / "collapsar-a1b2c3")
