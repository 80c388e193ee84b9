"""CPU speed per instance without a kernel: the `cpu-speed` key (its value,
the cores it needs, one line with the place for each bad value), the quota
it gives with `cpus` and `cpuset` (exact microseconds), what local mode
writes into a fake v1 and v2 tree, the Compose file's cpu_quota and
cpu_period, Swarm's refusal naming the mode and the key, and the dry run's
line.  The speed a real kernel achieves: tests/kernel/test_local_cpu_speed.py
and the VM tier (tests/vm/test_cpu_speed_vm.py)."""

from __future__ import annotations

import pytest
import yaml
from cgroup_support import v1_tree, v2_tree

from collapsar.commands.generate import generate_text
from collapsar.cpuspeed import CpuBandwidth, cpu_bandwidth, speed_bandwidth
from collapsar.errors import TopologyError
from collapsar.manager.dryrun import describe_run
from collapsar.manager.local.cgroups import Write, limit_writes
from collapsar.manager.local.limits import RunGroups, describe_limits
from collapsar.parser import parse_text
from collapsar.resources import check_mode
from collapsar.timeline import build_timeline
from collapsar.yamlout import to_yaml

SLOW = """\
services:
  one: {command: [x], cpuset: "1", cpu-speed: 0.5}
  two: {command: [x], cpus: 2, cpu-speed: 0.25}
  both: {command: [x], cpus: 1.5, cpuset: "0-3", cpu-speed: 0.5}
  crawl: {command: [x], cpuset: "0", cpu-speed: 0.05}
"""


def _service(text: str, name: str):
    return parse_text(text, "t.yaml").service(name)


@pytest.mark.parametrize(
    "name, quota_us, period_us",
    [
        ("one", 5_000, 10_000),  # 0.5 x 1 core x 10 ms
        ("two", 5_000, 10_000),  # 0.25 x 2 cores x 10 ms
        ("both", 7_500, 10_000),  # 0.5 x min(1.5, 4 CPUs) x 10 ms
        ("crawl", 1_000, 20_000),  # 0.05 x 1 x 10 ms is under 1 ms: the period grows
    ],
)
def test_the_quota_is_speed_times_cores_times_the_period(name, quota_us, period_us):
    assert cpu_bandwidth(_service(SLOW, name)) == CpuBandwidth(quota_us, period_us)


def test_the_period_stays_at_10_ms_down_to_a_tenth_of_a_cpu_and_grows_to_100_ms():
    assert speed_bandwidth(0.1, 1) == CpuBandwidth(1_000, 10_000)
    assert speed_bandwidth(0.3, 1) == CpuBandwidth(3_000, 10_000)
    assert speed_bandwidth(0.03, 1) == CpuBandwidth(1_000, 33_334)
    assert speed_bandwidth(0.02, 0.5) == CpuBandwidth(1_000, 100_000)
    assert speed_bandwidth(1, 2) == CpuBandwidth(20_000, 10_000)


def test_speed_1_adds_no_quota_of_its_own():
    pinned = _service("services:\n  s: {command: [x], cpuset: '0', cpu-speed: 1}\n", "s")
    shared = _service("services:\n  s: {command: [x], cpus: 1.5, cpu-speed: 1}\n", "s")
    assert cpu_bandwidth(pinned) is None
    assert cpu_bandwidth(shared) == CpuBandwidth(150_000, 100_000)  # what cpus alone gives
    assert describe_limits(pinned) == "cpuset 0, cpu-speed 1: full speed, no quota of its own"


def test_cpus_alone_keeps_dockers_100_ms_period():
    service = _service("services:\n  s: {command: [x], cpus: 0.5}\n", "s")
    assert cpu_bandwidth(service) == CpuBandwidth(50_000, 100_000)
    assert cpu_bandwidth(_service("services:\n  s: {command: [x], cpuset: '0'}\n", "s")) is None


@pytest.mark.parametrize(
    "body, problem",
    [
        ("{command: [x], cpuset: '0', cpu-speed: 0}", "cpu-speed: expected a speed above 0 and at most 1 like 0.5"),
        ("{command: [x], cpuset: '0', cpu-speed: 1.5}", "cpu-speed: expected a speed above 0 and at most 1 like 0.5"),
        ("{command: [x], cpuset: '0', cpu-speed: -0.5}", "cpu-speed: expected a speed above 0 and at most 1 like 0.5"),
        ("{command: [x], cpuset: '0', cpu-speed: half}", "cpu-speed: expected a speed above 0 and at most 1 like 0.5"),
        ("{command: [x], cpuset: '0', cpu-speed: true}", "cpu-speed: expected a speed above 0 and at most 1 like 0.5"),
        ("{command: [x], cpuset: '0', cpu-speed: .nan}", "cpu-speed: expected a speed above 0 and at most 1 like 0.5"),
        ("{command: [x], cpuset: '0', cpu-speed: [0.5]}", "cpu-speed: expected a single value, got a list"),
        (
            "{command: [x], cpu-speed: 0.5}",
            "cpu-speed needs cpus or cpuset: the number of cores that run at that speed",
        ),
        (
            "{command: [x], cpus: 0.1, cpu-speed: 0.05}",
            "cpu-speed 0.05 on 0.1 core(s) is 0.005 of a CPU, below the kernel's floor of 0.01 "
            "(1 ms of CPU time per 100 ms); raise cpu-speed or cpus",
        ),
    ],
)
def test_a_bad_cpu_speed_is_one_line_with_file_line_and_service(body, problem):
    with pytest.raises(TopologyError) as bad:
        parse_text(f"services:\n  web: {{command: [x]}}\n  db: {body}\n", "t.yaml")
    (line,) = bad.value.lines()
    assert line.startswith(f"t.yaml:3: service db: {problem}"), line


def test_a_bad_cpus_beside_a_speed_is_reported_once():
    with pytest.raises(TopologyError) as bad:
        parse_text("services:\n  db: {command: [x], cpus: many, cpu-speed: 0.5}\n", "t.yaml")
    assert bad.value.lines() == [
        "t.yaml:2: service db: cpus: expected a number of CPUs above 0 like 0.5 or 2, got 'many'"
    ]


def test_cpu_speed_survives_a_round_trip():
    again = parse_text(to_yaml(parse_text(SLOW, "t.yaml")), "t.yaml")
    assert [s.cpu_speed for s in again.services] == [0.5, 0.25, 0.5, 0.05]


def test_local_mode_writes_the_one_quota_v1_and_v2(tmp_path):
    _, v1 = v1_tree(tmp_path / "one")
    _, v2 = v2_tree(tmp_path / "two")
    bandwidth = cpu_bandwidth(_service(SLOW, "one"))
    assert limit_writes(v1, bandwidth, (1,), None) == [
        Write("cpu", "cpu.cfs_period_us", "10000"),
        Write("cpu", "cpu.cfs_quota_us", "5000"),
        Write("cpuset", "cpuset.cpus", "1"),
    ]
    assert limit_writes(v2, bandwidth, (1,), None) == [
        Write("cpu", "cpu.max", "5000 10000"),
        Write("cpuset", "cpuset.cpus", "1"),
    ]


def test_a_run_writes_the_speed_quota_into_each_instances_group(tmp_path):
    _, layout = v1_tree(tmp_path)
    experiment = parse_text("services:\n  s: {command: [x], cpus: 2, cpu-speed: 0.25, replicas: 2}\n", "t.yaml")
    groups = RunGroups.plan(experiment, ["s", "s-2"], "a1b2c3", layout)
    groups.create(_Journal(), lambda line: None)
    for instance in ("s", "s-2"):
        group = tmp_path / "cpu,cpuacct" / "collapsar-a1b2c3" / instance
        assert (group / "cpu.cfs_quota_us").read_text() == "5000"
        assert (group / "cpu.cfs_period_us").read_text() == "10000"


class _Journal:
    def record(self, kind: str, **fields) -> None:
        pass


def test_compose_sets_quota_and_period_instead_of_cpus(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW)
    services = yaml.safe_load(generate_text(str(path), swarm=False))["services"]
    assert {k: v for k, v in services["both"].items() if k.startswith("cpu")} == {
        "cpu_period": 10_000,
        "cpu_quota": 7_500,
        "cpuset": "0-3",
    }
    assert (services["two"]["cpu_period"], services["two"]["cpu_quota"]) == (10_000, 5_000)
    assert "cpus" not in services["two"]  # Docker refuses cpus together with a period


def test_swarm_refuses_cpu_speed_naming_the_mode_and_the_key():
    experiment = parse_text("services:\n  s: {command: [x], cpus: 1, cpu-speed: 0.5}\n", "t.yaml")
    check_mode(experiment, "local")
    check_mode(experiment, "compose")
    with pytest.raises(TopologyError) as refused:
        check_mode(experiment, "swarm")
    assert refused.value.lines() == [
        "t.yaml:2: service s: cpu-speed: swarm mode cannot honour it: a Swarm service cannot set its CPU period "
        "(its cpus limit is a quota per Docker's fixed 100 ms period, not cpu-speed's 10 ms); "
        "remove the key or use local mode or compose mode"
    ]


def test_the_dry_run_and_check_show_the_speed_and_its_quota():
    experiment = parse_text(SLOW.split("  both:")[0], "t.yaml")
    assert describe_limits(experiment.service("one")) == (
        "cpuset 1, cpu-speed 0.5 on 1 core(s): quota 5000 us per 10000 us period (0.5 CPU)"
    )
    lines = describe_run(experiment, build_timeline(experiment), "10.9.0.0/24")
    limits = [line for line in lines if line.startswith("  limits")]
    assert limits == [
        "  limits, in its own control groups (local/limits.py): cpuset 1, cpu-speed 0.5 on 1 core(s): "
        "quota 5000 us per 10000 us period (0.5 CPU)",
        "  limits, in its own control groups (local/limits.py): cpus 2, cpu-speed 0.25 on 2 core(s): "
        "quota 5000 us per 10000 us period (0.5 CPU)",
    ]
