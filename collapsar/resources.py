"""Host resources per instance: the service keys `cpus`, `cpuset`,
`cpu-speed` (collapsar.cpuspeed) and `memory`, and which of them each
runtime mode can honour.

  local    a control group per instance (collapsar.manager.local.limits)
  compose  the engine's cpus, cpuset and mem_limit, or with cpu-speed its
           cpu_quota and cpu_period (collapsar.deploy.stack)
  swarm    the engine's resources.limits: cpus and memory; a Swarm service
           cannot pin CPUs (`docker service` has no cpuset) nor choose its
           CPU period (so no cpu-speed)

A key a mode cannot honour is an error naming the mode and the key, raised
before that mode deploys anything (`check_mode`), never a limit silently
left out.  The CPU list syntax (`cpuset: "0-1,3"`, the kernel's list
format) is parsed here once, for the parser.
"""

from __future__ import annotations

from collections.abc import Iterable

from collapsar.errors import Problem, TopologyError, UnitError
from collapsar.model import Experiment, Service

MODES = ("local", "compose", "swarm")
# mode -> key -> why that mode cannot honour it
CANNOT: dict[str, dict[str, str]] = {
    "swarm": {
        "cpuset": "a Swarm service cannot pin CPUs (docker service has no cpuset)",
        "cpu-speed": "a Swarm service cannot set its CPU period (its cpus limit is a quota per Docker's "
        "fixed 100 ms period, not cpu-speed's 10 ms)",
    },
}
MAX_CPU = 8191  # the kernel's largest NR_CPUS is 8192
_CPU_LIST = "CPU numbers like 0-1 or 0,2-3"


def parse_cpu_list(value: object) -> tuple[int, ...]:
    """'0-2,5' -> (0, 1, 2, 5): the kernel's list format (cpuset.cpus,
    Cpus_allowed_list), sorted and without repeats; a lone number is one CPU."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise UnitError(f"expected {_CPU_LIST}, got {value!r}")
    cpus: set[int] = set()
    for item in value.split(","):
        low, dash, high = item.strip().partition("-")
        if not (low.isdigit() and (high.isdigit() if dash else not high)):
            raise UnitError(f"expected {_CPU_LIST}, got {value!r}")
        first, last = int(low), int(high) if dash else int(low)
        if first > last:
            raise UnitError(f"expected {_CPU_LIST} (a range low-high), got {item.strip()!r} in {value!r}")
        if last > MAX_CPU:
            raise UnitError(f"expected CPU numbers from 0 to {MAX_CPU}, got {last} in {value!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5': as cpuset.cpus and Docker's --cpuset-cpus read it."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def keys_set(service: Service) -> list[str]:
    """The host-resource keys a service sets, as the language names them."""
    keys = []
    if service.cpus is not None:
        keys.append("cpus")
    if service.cpuset is not None:
        keys.append("cpuset")
    if service.cpu_speed is not None:
        keys.append("cpu-speed")
    if service.memory_bytes is not None:
        keys.append("memory")
    return keys


def check_mode(experiment: Experiment, mode: str) -> None:
    """Refuse, in one line per service and key (`FILE:LINE: service X: KEY:
    MODE mode cannot honour it: why`), every key `mode` cannot honour."""
    cannot = CANNOT.get(mode, {})
    problems = [
        Problem(
            service.where,
            f"service {service.name}: {key}: {mode} mode cannot honour it: {cannot[key]}; "
            f"remove the key or use {_modes_with(key)}",
        )
        for service in experiment.services
        for key in keys_set(service)
        if key in cannot
    ]
    if problems:
        raise TopologyError(problems)


def _modes_with(key: str) -> str:
    return " or ".join(f"{mode} mode" for mode in MODES if key not in CANNOT.get(mode, {}))
