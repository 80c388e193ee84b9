"""Host resources per instance in the language and the Docker modes: the
`cpuset` key (the kernel's CPU list format, parsed once, errors with the
place), `cpus`, `cpuset` and `memory` in the Compose and Swarm files, and
a key a mode cannot honour (cpuset on Swarm) refused with the mode and the
key, by `collapsar generate` and by the container manager alike."""

from __future__ import annotations

import pytest
import yaml

from collapsar.commands.generate import generate_text
from collapsar.errors import TopologyError, UnitError
from collapsar.parser import parse_text
from collapsar.resources import check_mode, format_cpu_list, parse_cpu_list
from collapsar.yamlout import to_yaml

PINNED = """\
services:
  web: {command: [x], cpus: 1.5, cpuset: "0-1,3", memory: 64m}
  db: {command: [x], cpuset: 2}
"""


@pytest.mark.parametrize(
    "text, cpus",
    [("0", (0,)), (3, (3,)), ("0-2", (0, 1, 2)), ("0-1,3", (0, 1, 3)), ("5, 1-2,2", (1, 2, 5)), ("7-7", (7,))],
)
def test_a_cpu_list_is_read_as_the_kernel_writes_it(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "expected CPU numbers like 0-1 or 0,2-3, got ''"),
        ("1-a", "expected CPU numbers like 0-1 or 0,2-3, got '1-a'"),
        ("0,,1", "expected CPU numbers like 0-1 or 0,2-3, got '0,,1'"),
        ("-1", "expected CPU numbers like 0-1 or 0,2-3, got '-1'"),
        ("3-1", "expected CPU numbers like 0-1 or 0,2-3 (a range low-high), got '3-1' in '3-1'"),
        ("0-9000", "expected CPU numbers from 0 to 8191, got 9000 in '0-9000'"),
        (True, "expected CPU numbers like 0-1 or 0,2-3, got True"),
        (1.5, "expected CPU numbers like 0-1 or 0,2-3, got 1.5"),
    ],
)
def test_a_bad_cpu_list_says_what_was_expected(text, error):
    with pytest.raises(UnitError) as bad:
        parse_cpu_list(text)
    assert str(bad.value) == error


def test_a_cpu_list_is_written_back_as_ranges():
    assert format_cpu_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    assert format_cpu_list([3]) == "3"


def test_cpuset_is_a_service_key_and_survives_a_round_trip():
    experiment = parse_text(PINNED, "t.yaml")
    assert [s.cpuset for s in experiment.services] == [(0, 1, 3), (2,)]
    again = parse_text(to_yaml(experiment), "t.yaml")
    assert [(s.cpus, s.cpuset, s.memory_bytes) for s in again.services] == [
        (1.5, (0, 1, 3), 64 << 20),
        (None, (2,), None),
    ]


def test_a_bad_cpuset_names_the_file_line_and_service():
    with pytest.raises(TopologyError) as bad:
        parse_text("services:\n  web: {command: [x]}\n  db:\n    command: [x]\n    cpuset: 0-x\n", "t.yaml")
    assert bad.value.lines() == ["t.yaml:5: service db: cpuset: expected CPU numbers like 0-1 or 0,2-3, got '0-x'"]


def test_swarm_cannot_pin_cpus_and_says_so_for_each_service():
    experiment = parse_text(PINNED, "t.yaml")
    check_mode(experiment, "local")
    check_mode(experiment, "compose")
    with pytest.raises(TopologyError) as refused:
        check_mode(experiment, "swarm")
    assert refused.value.lines() == [
        f"t.yaml:{line}: service {name}: cpuset: swarm mode cannot honour it: a Swarm service cannot pin CPUs "
        f"(docker service has no cpuset); remove the key or use local mode or compose mode"
        for line, name in ((2, "web"), (3, "db"))
    ]


def test_compose_pins_and_limits_as_local_mode_does(tmp_path):
    path = tmp_path / "pinned.yaml"
    path.write_text(PINNED)
    web = yaml.safe_load(generate_text(str(path), swarm=False))["services"]["web"]
    assert (web["cpus"], web["cpuset"], web["mem_limit"], web["memswap_limit"]) == (1.5, "0-1,3", "64M", "64M")


def test_generate_refuses_a_swarm_stack_with_a_cpuset(tmp_path):
    path = tmp_path / "pinned.yaml"
    path.write_text(PINNED)
    with pytest.raises(TopologyError, match=r"pinned.yaml:2: service web: cpuset: swarm mode cannot honour it"):
        generate_text(str(path), swarm=True)
    path.write_text("services:\n  web: {command: [x], cpus: 0.25, memory: 1g}\n")
    web = yaml.safe_load(generate_text(str(path), swarm=True))["services"]["web"]
    assert web["deploy"]["resources"] == {"limits": {"cpus": "0.25", "memory": "1024M"}}
