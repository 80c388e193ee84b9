"""The host's control groups as local mode uses them: which hierarchy holds
each controller a limit needs, where a run's groups go in it, which files
carry a limit, and how many OOM kills a group has seen.

Each controller lives in exactly one place.  cgroup v1 mounts hierarchies
of one or a few controllers (`/sys/fs/cgroup/cpu`, `cpuset`, `memory`, or
`cpu,cpuacct` together); cgroup v2 has one cgroup2 mount whose root offers
(cgroup.controllers) every controller not bound to a v1 hierarchy.  The
machines this project is built on mount cpu, cpuset and memory as v1 beside
a cgroup2 mount without controllers, current distributions have v2 only; a
hybrid host (some of each) works the same, since detection is per
controller.  `detect` reads /proc/self/mountinfo at run start, and again in
`collapsar cleanup`, which so derives every group it removes from the run
id and an instance name alone (limits.check_records).

A run's groups sit at the top of each hierarchy, `collapsar-RUNID/INSTANCE`,
as Docker's own (cgroupfs driver) do: on v2 only the root may hold
processes and still give controllers to its children, so a group below the
manager's own could not work there.

Limits mean what Docker's do, so a service limited in local mode is limited
alike in Compose: `cpus` is a CFS quota per 100 ms period (--cpus),
`cpuset` the CPUs it may run on (--cpuset-cpus), `memory` a hard limit with
no swap beyond it (--memory with --memory-swap equal to it).  `cpu-speed`
turns the quota into speed x cores per 10 ms period (--cpu-quota with
--cpu-period; collapsar.cpuspeed), one quota for both keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collapsar.cpuspeed import CpuBandwidth
from collapsar.errors import UnitError
from collapsar.resources import format_cpu_list, parse_cpu_list

CONTROLLERS = ("cpu", "cpuset", "memory")
MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 1 or 2
    mount: Path  # its root as mounted here


@dataclass(frozen=True)
class Write:
    """One value written into a new group, in order; an optional file is
    skipped where the kernel does not have it (swap accounting off)."""

    controller: str
    file: str
    value: str
    optional: bool = False


def run_group_name(run_id: str) -> str:
    return f"collapsar-{run_id}"


@dataclass(frozen=True)
class Layout:
    """controller -> the hierarchy that holds it on this host."""

    hierarchies: dict[str, Hierarchy]
    v2_mount: Path | None = None  # the cgroup2 mount, controllers or not

    def has(self, controller: str) -> bool:
        return controller in self.hierarchies

    def run_group(self, controller: str, run_id: str) -> Path:
        return self.hierarchies[controller].mount / run_group_name(run_id)

    def group(self, controller: str, run_id: str, instance: str | None) -> Path:
        """The run's group (instance None) or an instance's, in the hierarchy of `controller`."""
        base = self.run_group(controller, run_id)
        return base if instance is None else base / instance

    def version(self, controller: str) -> int:
        return self.hierarchies[controller].version

    def distinct(self, controllers: list[str]) -> list[str]:
        """One controller per hierarchy among these (v2 holds them all in one)."""
        seen: dict[Path, str] = {}
        for controller in controllers:
            seen.setdefault(self.hierarchies[controller].mount, controller)
        return list(seen.values())

    def describe(self, controllers: list[str]) -> str:
        """'cgroup v1 (cpu at /sys/fs/cgroup/cpu, memory at ...)' or 'cgroup v2 at /sys/fs/cgroup'."""
        by = {c: self.hierarchies[c] for c in controllers}
        if by and all(h.version == 2 for h in by.values()):
            return f"cgroup v2 at {next(iter(by.values())).mount}"
        return "cgroups (" + ", ".join(f"{c}: v{h.version} at {h.mount}" for c, h in by.items()) + ")"


def detect(mountinfo: str | None = None) -> Layout:
    """Where each of CONTROLLERS lives here, from mountinfo (this process's
    by default).  A controller that no hierarchy offers is simply absent."""
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    found: dict[str, Hierarchy] = {}
    v2_mount = None
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or dash < 5:
            continue
        fstype, mount, options = fields[dash + 1], Path(_unescape(fields[4])), fields[dash + 3].split(",")
        if fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    found.setdefault(controller, Hierarchy(1, mount))
        elif fstype == "cgroup2" and v2_mount is None:
            v2_mount = mount
    if v2_mount is not None:
        offered = _words(v2_mount / "cgroup.controllers")
        for controller in CONTROLLERS:
            if controller in offered and controller not in found:
                found[controller] = Hierarchy(2, v2_mount)
    return Layout(found, v2_mount)


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("040", "011", "012", "134"):
        text = text.replace("\\" + code, chr(int(code, 8)))
    return text


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def limit_writes(
    layout: Layout, cpu: CpuBandwidth | None, cpuset: tuple[int, ...] | None, memory_bytes: int | None
) -> list[Write]:
    """What an instance's groups get, in order (the hierarchies must hold
    each controller a set key needs; cpuset.mems, which v1 needs too, is the
    run group's, copied when the group is made).  `cpu` is the quota of
    cpus and cpu-speed together (collapsar.cpuspeed.cpu_bandwidth)."""
    writes = []
    if cpu is not None:
        if layout.version("cpu") == 2:
            writes.append(Write("cpu", "cpu.max", f"{cpu.quota_us} {cpu.period_us}"))
        else:
            # A new v1 group's quota is unlimited (-1): the period may go first.
            writes += [
                Write("cpu", "cpu.cfs_period_us", str(cpu.period_us)),
                Write("cpu", "cpu.cfs_quota_us", str(cpu.quota_us)),
            ]
    if cpuset is not None:
        writes.append(Write("cpuset", "cpuset.cpus", format_cpu_list(cpuset)))
    if memory_bytes is not None:
        if layout.version("memory") == 2:
            writes += [
                Write("memory", "memory.max", str(memory_bytes)),
                Write("memory", "memory.swap.max", "0", optional=True),
            ]
        else:
            # memsw (memory + swap) at the same value: no swap beyond the
            # limit.  Set after limit_in_bytes, which it may never be below.
            writes += [
                Write("memory", "memory.limit_in_bytes", str(memory_bytes)),
                Write("memory", "memory.memsw.limit_in_bytes", str(memory_bytes), optional=True),
            ]
    return writes


def controllers_for(cpu: CpuBandwidth | None, cpuset: tuple[int, ...] | None, memory_bytes: int | None) -> list[str]:
    return [
        controller
        for controller, value in (("cpu", cpu), ("cpuset", cpuset), ("memory", memory_bytes))
        if value is not None
    ]


def host_cpus(layout: Layout) -> tuple[int, ...] | None:
    """The CPUs a group at the top of the cpuset hierarchy may use (None:
    no cpuset controller here).  v1's root cpuset.cpus is every online CPU;
    v2's root has only the effective list."""
    if not layout.has("cpuset"):
        return None
    mount = layout.hierarchies["cpuset"].mount
    name = "cpuset.cpus.effective" if layout.version("cpuset") == 2 else "cpuset.cpus"
    try:
        return parse_cpu_list((mount / name).read_text().strip())
    except (OSError, UnitError):
        return None


def oom_kills(layout: Layout, group: Path) -> int | None:
    """How many processes the OOM killer has killed in a memory group (None:
    the kernel does not count them there): v2 memory.events, v1
    memory.oom_control (`oom_kill`, since Linux 4.13)."""
    name = "memory.events" if layout.version("memory") == 2 else "memory.oom_control"
    try:
        text = (group / name).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None
