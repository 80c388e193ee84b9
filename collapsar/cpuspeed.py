"""CPU speed per instance, the service key `cpu-speed`: each core the
instance uses runs `speed` times as fast as this host's (0.5: half as fast),
and the CFS bandwidth quota that emulates it.

The method is the quota (the slides' CPU-Lim and Fracas family, done by the
kernel's CFS bandwidth control rather than by signals): the instance's
control group may run `speed x cores x period` of CPU time in each period,
all its threads together, where `cores` is what `cpus` and `cpuset` give it
(the smaller of the two when both are set; `cpu-speed` needs one of them).
Frequency scaling, which slows every instruction and is the faithful
method, needs the host's cpufreq driver and whole cores: not available to
an emulator that shares a host.  What a quota does and does not emulate is
in docs/language.md ("CPU speed").

The period is SPEED_PERIOD_US, 10 ms: the longest burst that runs at full
speed is the quota, so the period should be short, but not shorter than a
few scheduler ticks (4 ms at HZ=250), the granularity at which the kernel
notices an exhausted quota.  Measured on this project's host (HZ=250, one
CPU-bound thread, 3 runs each, at speeds 0.5 and 0.25, the host busy with
other work): periods of 2 and 4 ms made it 8-40% slower than configured,
periods of 8 to 100 ms 2-8%, with no trend in the period; a 5 ms burst
after a 50 ms sleep was stretched 1.2 times at speed 0.5 with a 10 ms
period, not at all with 20 ms or more.  Where speed x cores is below 0.1 the period grows so that the quota
stays at the kernel's floor of 1 ms; speed x cores must be at least 0.01
(a period of at most 100 ms, the floor `cpus` has too).

Without `cpu-speed`, `cpus` alone keeps Docker's meaning (a quota per
100 ms period, DOCKER_CPUS_PERIOD_US): `cpu_bandwidth` gives either.  Speed
1 adds no quota of its own: a quota of exactly its cores still throttles a
thread now and then (measured: 36 of 200 periods, 1.7% of its time, for one
spinning thread on a busy host), so the instance keeps what `cpus` alone
gives it, if anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collapsar.errors import UnitError
from collapsar.model import Service

SPEED_PERIOD_US = 10_000  # see the module doc
DOCKER_CPUS_PERIOD_US = 100_000  # Docker's --cpus period
MIN_QUOTA_US = 1_000  # the kernel refuses a quota or a period under 1 ms
MIN_CPU_SHARE = 0.01  # CPUs' worth: 1 ms per 100 ms (Docker's --cpus floor too)


@dataclass(frozen=True)
class CpuBandwidth:
    """CPU time an instance's group may run in each period, its threads together."""

    quota_us: int
    period_us: int

    @property
    def cpus(self) -> float:
        """CPUs' worth of time it gets."""
        return self.quota_us / self.period_us


def parse_cpu_speed(value: object) -> float:
    """A speed factor: a number above 0 and at most 1 (a quota can only slow a core down)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= 1:
        shown = repr(value) if isinstance(value, str) else value
        raise UnitError(
            f"expected a speed above 0 and at most 1 like 0.5 (a core half as fast as this host's), got {shown}"
        )
    return float(value)


def speed_cores(cpus: float | None, cpuset: tuple[int, ...] | None) -> float | None:
    """How many cores run at the speed: `cpus`, the CPUs of `cpuset`, the smaller of both."""
    counts = [count for count in (cpus, None if cpuset is None else float(len(cpuset))) if count is not None]
    return min(counts) if counts else None


def speed_problem(speed: float, cpus: float | None, cpuset: tuple[int, ...] | None) -> str | None:
    """Why this speed cannot go with these keys, or None."""
    cores = speed_cores(cpus, cpuset)
    if cores is None:
        return "cpu-speed needs cpus or cpuset: the number of cores that run at that speed"
    share = speed * cores
    if share < MIN_CPU_SHARE - 1e-12:
        return (
            f"cpu-speed {speed:g} on {cores:g} core(s) is {share:g} of a CPU, below the kernel's floor of "
            f"{MIN_CPU_SHARE:g} (1 ms of CPU time per 100 ms); raise cpu-speed or cpus"
        )
    return None


def speed_bandwidth(speed: float, cores: float) -> CpuBandwidth:
    """speed x cores x period per period: SPEED_PERIOD_US, or longer where
    the quota would fall below the kernel's floor (see the module doc)."""
    share = speed * cores
    period_us = max(SPEED_PERIOD_US, math.ceil(MIN_QUOTA_US / share - 1e-9))
    return CpuBandwidth(max(MIN_QUOTA_US, round(share * period_us)), period_us)


def slowed(service: Service) -> bool:
    """Its cpu-speed makes the quota (below 1: see the module doc)."""
    return service.cpu_speed is not None and service.cpu_speed < 1


def cpu_bandwidth(service: Service) -> CpuBandwidth | None:
    """The one quota an instance of `service` gets (None: its CPU time is not limited)."""
    if service.cpu_speed is not None and service.cpu_speed < 1:
        cores = speed_cores(service.cpus, service.cpuset)
        if cores is None:  # the parser refuses it; a model built by hand may not
            raise ValueError(f"service {service.name}: cpu-speed needs cpus or cpuset")
        return speed_bandwidth(service.cpu_speed, cores)
    if service.cpus is not None:
        return CpuBandwidth(round(service.cpus * DOCKER_CPUS_PERIOD_US), DOCKER_CPUS_PERIOD_US)
    return None


def describe_speed(service: Service) -> str | None:
    """'cpu-speed 0.5 on 1 core(s): quota 5000 us per 10000 us period' (None: no cpu-speed)."""
    if service.cpu_speed is None:
        return None
    bandwidth = cpu_bandwidth(service)
    if not slowed(service) or bandwidth is None:
        return "cpu-speed 1: full speed, no quota of its own"
    cores = speed_cores(service.cpus, service.cpuset)
    return (
        f"cpu-speed {service.cpu_speed:g} on {cores:g} core(s): quota {bandwidth.quota_us} us "
        f"per {bandwidth.period_us} us period ({bandwidth.cpus:g} CPU)"
    )
